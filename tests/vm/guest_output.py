"""The KEY=VALUE lines a guest script prints (upper-case keys), for the vm
tests' checkers: values(stream) reads them, need(vals, key, who) takes one or
exits naming the checker and the missing key."""
import sys


def values(stream):
    vals = {}
    for line in stream:
        key, sep, rest = line.strip().partition("=")
        if sep and key.isupper():
            vals[key] = rest
    return vals


def need(vals, key, who):
    if key not in vals:
        sys.exit(f"{who}: FAIL: no {key}= line in the guest's output")
    return vals[key]
