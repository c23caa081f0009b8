#!/usr/bin/env python3
"""The tiering benchmark's report: the package bench/report/ (its modules inputs, metrics, mode,
runs, table, write, cli), run with the same command line as before it was a package:

Usage: report.py DIR [--modes none,kernel,damos,oracle,kvtier] [--no-plot]
       report.py --line FILE.jsonl [--mode NAME]   one line of the table's columns for one run
"""

import sys

from report.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
