#!/usr/bin/env python3
"""Unit tests of bench/report.py's metrics: precision/recall of demotion against kvsim's ground
truth, run expansion, migration rates and CPU deltas from probe samples, the DRAM read share
from kvsim's cumulative counters, the oracle's exact check, medians and ranges over repeated
runs with the oracle as the reference, and whole reports from synthetic mode files."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import report  # noqa: E402

SEC = 1_000_000_000
HEADER = "block,tensor,start,end,state,last_access_ns,accesses,writes\n"


def truth_csv(rows):
    return HEADER + "".join(f"{b},0,{s},{e},{st},{last},1,1\n" for b, s, e, st, last in rows)


class DemotionScore(unittest.TestCase):
    def test_exact_counts_for_a_scripted_layout(self):
        # Four chunks of two pages at 0x10000: chunk 0 and 2 cold (last access 20 s before now),
        # 1 and 3 hot (1 s before). Pages on node 1: chunk 0 (both), chunk 1 (one), chunk 2 none.
        base = 0x10000
        now = 100 * SEC
        rows = truth_csv([
            (0, base, base + 8192, "cached", now - 20 * SEC),
            (1, base + 8192, base + 16384, "active", now - 1 * SEC),
            (2, base + 16384, base + 24576, "free", now - 20 * SEC),
            (3, base + 24576, base + 32768, "active", now - 1 * SEC),
        ])
        pages = report.expand_runs([[1, 2], [1, 1], [0, 1], [0, 2], [0, 2]])
        s = report.demotion_score(base, pages, report.parse_truth_csv(rows), now, 10 * SEC)
        self.assertEqual(s["considered_bytes"], 8 * 4096)
        self.assertEqual(s["demoted_bytes"], 3 * 4096)
        self.assertEqual(s["cold_bytes"], 4 * 4096)
        self.assertEqual(s["demoted_cold_bytes"], 2 * 4096)
        self.assertAlmostEqual(s["precision"], 2 / 3)
        self.assertAlmostEqual(s["recall"], 2 / 4)
        self.assertEqual(s["precision_ceiling"], 1.0)  # less on node 1 than is cold
        self.assertIsNone(s["demoted_hot_early_bytes"])  # an older kvsim's truth: no episodes

    def test_not_cold_bytes_on_the_slow_node_split_by_their_episode(self):
        # Three chunks of two pages, all on node 1: chunk 0 cold; chunk 1 hot, its block's use
        # began 2 s before now (a new fill); chunk 2 hot, in use for 8 s. Window 5 s.
        base = 0x10000
        now = 100 * SEC
        rows = HEADER.rstrip("\n") + ",episode_start_ns\n" + "".join(
            f"{b},0,{st},{st + 8192},active,{last},1,1,{ep}\n" for b, st, last, ep in [
                (0, base, now - 20 * SEC, now - 30 * SEC),
                (1, base + 8192, now - 1 * SEC, now - 2 * SEC),
                (2, base + 16384, now - 1 * SEC, now - 8 * SEC)])
        truth = report.parse_truth_csv(rows)
        self.assertEqual(truth[1], (base + 8192, base + 16384, now - SEC, "active", now - 2 * SEC))
        s = report.demotion_score(base, report.expand_runs([[1, 6]]), truth, now, 10 * SEC)
        self.assertEqual(s["demoted_bytes"], 6 * 4096)
        self.assertAlmostEqual(s["precision"], 1 / 3)
        self.assertAlmostEqual(s["precision_ceiling"], 1 / 3)
        self.assertEqual(s["demoted_hot_early_bytes"], 2 * 4096)
        # A 10 s window: chunk 2's use began within it too.
        s = report.demotion_score(base, report.expand_runs([[1, 6]]), truth, now, 10 * SEC,
                                  window_ns=10 * SEC)
        self.assertEqual(s["demoted_hot_early_bytes"], 4 * 4096)

    def test_cold_age_boundary_and_undefined_ratios(self):
        base = 0
        now = 50 * SEC
        rows = report.parse_truth_csv(truth_csv([(0, base, base + 4096, "cached", now - 10 * SEC)]))
        # Exactly the cold age counts as cold (kvsim's own rule).
        self.assertEqual(report.demotion_score(base, [0], rows, now, 10 * SEC)["cold_bytes"], 4096)
        self.assertEqual(report.demotion_score(base, [0], rows, now, 10 * SEC + 1)["cold_bytes"], 0)
        # Nothing on node 1: precision undefined, recall 0.
        s = report.demotion_score(base, [0], rows, now, 10 * SEC)
        self.assertIsNone(s["precision"])
        self.assertEqual(s["recall"], 0)
        # Nothing cold: recall undefined.
        s = report.demotion_score(base, [1], rows, now, 60 * SEC)
        self.assertIsNone(s["recall"])
        self.assertEqual(s["precision"], 0)

    def test_unplaced_pages_and_chunks_outside_the_map_are_left_out(self):
        base = 0x100000
        now = 100 * SEC
        rows = report.parse_truth_csv(truth_csv([
            (0, base, base + 8192, "cached", 0),
            (1, base + 8192, base + 16384, "cached", 0),  # beyond the two-page map
            (2, base - 8192, base, "cached", 0),  # before it
        ]))
        s = report.demotion_score(base, [1, -2], rows, now, SEC)
        self.assertEqual(s["considered_bytes"], 4096)
        self.assertEqual(s["demoted_cold_bytes"], 4096)
        self.assertEqual(s["precision"], 1.0)

    def test_chunks_smaller_than_a_page_split_it(self):
        base = 0
        now = 100 * SEC
        rows = report.parse_truth_csv(truth_csv([
            (0, 0, 2048, "cached", 0),  # cold half
            (1, 2048, 4096, "active", now),  # hot half
        ]))
        s = report.demotion_score(base, [1], rows, now, SEC)
        self.assertEqual(s["demoted_bytes"], 4096)
        self.assertEqual(s["cold_bytes"], 2048)
        self.assertAlmostEqual(s["precision"], 0.5)
        self.assertAlmostEqual(s["recall"], 1.0)

    def test_truth_without_header_is_rejected(self):
        with self.assertRaises(ValueError):
            report.parse_truth_csv("0,0,0,4096,free,0,0,0\n")


class Counters(unittest.TestCase):
    def sample(self, t_s, vm, cpu):
        return {"t_ns": int(t_s * SEC), "vmstat": vm, "cpu_ticks": cpu, "clk_tck": 100}

    def test_migration_rates_from_vmstat_deltas(self):
        a = self.sample(0, {"pgmigrate_success": 1000, "pgdemote_kswapd": 10, "pgdemote_direct": 0,
                            "pgpromote_success": 5, "pgmigrate_fail": 1, "numa_hint_faults": 7}, {})
        b = self.sample(4, {"pgmigrate_success": 1000 + 4 * 256, "pgdemote_kswapd": 10 + 512,
                            "pgdemote_direct": 512, "pgpromote_success": 5, "pgmigrate_fail": 3,
                            "numa_hint_faults": 17}, {})
        m = report.migration_rates(a, b)
        self.assertAlmostEqual(m["migrated_mib_s"], 1.0)
        self.assertAlmostEqual(m["demoted_mib_s"], 1.0)
        self.assertAlmostEqual(m["promoted_mib_s"], 0.0)
        self.assertEqual(m["migrate_fail_pages"], 2)
        self.assertEqual(m["numa_hint_faults"], 10)
        # A kernel without the counters: None, not zero.
        self.assertIsNone(report.migration_rates(self.sample(0, {}, {}), self.sample(1, {}, {}))["promoted_mib_s"])

    def test_cpu_seconds_by_comm_prefix(self):
        a = self.sample(0, {}, {"kswapd0": 100, "kswapd1": 50, "kvsim": 1000})
        b = self.sample(10, {}, {"kswapd0": 150, "kswapd1": 60, "kvsim": 1500, "kdamond.0": 30})
        self.assertAlmostEqual(report.cpu_seconds(a, b, ["kswapd"]), 0.6)
        self.assertAlmostEqual(report.cpu_seconds(a, b, ["kdamond"]), 0.3)  # appeared meanwhile
        self.assertEqual(report.cpu_seconds(a, b, ["kvtierd"]), 0)

    def test_move_cpu_share_from_kvtierds_dump(self):
        def dump(cpu):
            return {"src": "bench", "event": "kvtierd_dump", "dump": json.dumps({"loop": {"cpu": cpu}})}
        cpu = {"process_seconds": 8.0, "loop_seconds": 6.0,
               "loop_seconds_by_phase": {"move": 5.0, "sources": 1.0}}
        self.assertAlmostEqual(report.move_cpu_share(dump(cpu)), 5.0 / 8.0)
        # No dump, an older kvtierd's (no cpu), a daemon that has used nothing: None, not zero.
        self.assertIsNone(report.move_cpu_share(None))
        self.assertIsNone(report.move_cpu_share({"src": "bench", "event": "kvtierd_dump",
                                                 "dump": json.dumps({"loop": {}})}))
        self.assertIsNone(report.move_cpu_share(dump({"process_seconds": 0, "loop_seconds_by_phase": {"move": 0}})))

    def test_promotion_latency_by_who_from_kvtierds_dump(self):
        def bucket_list(counts):
            les = [0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, "+Inf"]
            return [{"le": le, "count": c} for le, c in zip(les, counts)]
        family = {"series": [
            {"labels": {"by": "kvtier"}, "count": 10, "sum": 30.0,
             "buckets": bucket_list([0, 1, 2, 4, 5, 8, 10, 10, 10, 10])},
            {"labels": {"by": "kernel"}, "count": 4, "sum": 1.0,
             "buckets": bucket_list([1, 2, 3, 4, 4, 4, 4, 4, 4, 4])},
            {"labels": {"by": "nobody"}, "count": 0, "sum": 0.0, "buckets": bucket_list([0] * 10)}]}
        dump = {"src": "bench", "event": "kvtierd_dump",
                "dump": json.dumps({"telemetry": {"kvtier_promotion_latency_seconds": family}})}
        lat = report.promotion_latency(dump)
        self.assertEqual(sorted(lat), ["kernel", "kvtier"])
        # kvtier: 5 of 10 by 2 s (the median's bucket), 8 of 10 by 5 s.
        self.assertEqual(lat["kvtier"], {"count": 10, "median_le": 2.0, "within_5s": 0.8})
        self.assertEqual(lat["kernel"], {"count": 4, "median_le": 0.25, "within_5s": 1.0})
        # An older kvtierd's series has no label: it was all kvtier's. No dump: nothing.
        family["series"][0]["labels"] = {}
        old = report.promotion_latency({"dump": json.dumps({"telemetry": {"kvtier_promotion_latency_seconds": family}})})
        self.assertEqual(old["kvtier"]["count"], 10)
        self.assertEqual(report.promotion_latency(None), {})
        self.assertEqual(report.promotion_latency({"dump": json.dumps({"telemetry": {}})}), {})

    def test_dram_read_share_between_stats_lines(self):
        def st(t, total, n0):
            return {"time_ns": t * SEC, "read_nodes": {"sampled_read_bytes": total, "by_node": {"0": n0, "1": total - n0}}}
        stats = [st(1, 100, 100), st(2, 200, 150), st(3, 400, 250), st(9, 1000, 250)]
        self.assertAlmostEqual(report.dram_read_share(stats, until_ns=3 * SEC), 250 / 400)
        self.assertAlmostEqual(report.dram_read_share(stats, until_ns=3 * SEC, since_ns=2 * SEC), 100 / 200)
        self.assertIsNone(report.dram_read_share([st(1, 0, 0)]))

    def test_reads_off_dram_split_by_the_reaction_window(self):
        def st(t, total, by, late):
            return {"time_ns": t * SEC, "read_nodes": {
                "sampled_read_bytes": total, "by_node": by, "late_by_node": late,
                "reaction_window_s": 5.0, "episode_gap_s": 10.0}}
        stats = [st(1, 100, {"0": 90, "1": 10}, {"0": 50, "1": 4}),
                 st(2, 300, {"0": 240, "1": 40, "2": 20}, {"0": 180, "1": 10, "2": 15}),
                 st(9, 900, {"0": 800, "1": 80, "2": 20}, {"0": 700, "1": 30, "2": 15})]
        split = report.cxl_read_split(stats, until_ns=2 * SEC, since_ns=1 * SEC)
        # Nodes 1 and 2 since the first line: 50 read, 21 of them late; node 0 never counts.
        self.assertEqual(split, {"read_bytes": 200, "slow_bytes": 50, "slow_late_bytes": 21,
                                 "slow_early_bytes": 29, "reaction_window_s": 5.0, "episode_gap_s": 10.0})
        self.assertEqual(report.cxl_read_split(stats)["slow_late_bytes"], 45)
        # An older kvsim (no late_by_node), or nothing read: no split.
        old = [{"time_ns": SEC, "read_nodes": {"sampled_read_bytes": 100, "by_node": {"1": 100}}}]
        self.assertIsNone(report.cxl_read_split(old))
        self.assertIsNone(report.cxl_read_split(stats[:1], since_ns=SEC))


class WholeReport(unittest.TestCase):
    def test_rows_for_a_measured_mode_and_an_unavailable_one(self):
        base = 0x200000
        pool = 4 * 4096
        t0 = 1000 * SEC
        with tempfile.TemporaryDirectory() as d:
            ev = [
                {"src": "bench", "event": "layout", "mode": "none", "kernel": "6.12", "memory_tiers": "t4: 0",
                 "nodes": {"0": {"total_kib": 1024, "free_kib": 512}, "1": {"total_kib": 2048, "free_kib": 2048}}},
                {"src": "bench", "event": "settings", "cold_age_s": 10},
                {"src": "kvsim", "event": "start", "pool_bytes": pool, "pool": [base, base + pool],
                 "trace": {"path": "/t/x.jsonl", "requests": 3}, "time_scale": 1.0, "scaled": "s",
                 "sim": {"blocks": 2, "block_bytes": 8192, "step_ms": 960}},
                {"src": "kvsim", "event": "stats", "time_ns": t0 + 5 * SEC,
                 "read_nodes": {"sampled_read_bytes": 100, "by_node": {"0": 75, "1": 25},
                                "late_by_node": {"0": 60, "1": 5}, "reaction_window_s": 5.0, "episode_gap_s": 10.0}},
                {"src": "kvsim", "event": "stats", "time_ns": t0 + 8 * SEC,
                 "read_nodes": {"sampled_read_bytes": 200, "by_node": {"0": 150, "1": 50},
                                "late_by_node": {"0": 140, "1": 20}, "reaction_window_s": 5.0, "episode_gap_s": 10.0}},
                {"src": "kvsim", "event": "end", "steps_per_s": 1.0, "step_work_ms": 3.0, "tokens": 9,
                 "corrupted_bytes": 0, "result": "ok"},
                {"src": "probe", "event": "sample", "i": 0, "t_ns": t0, "t_s": 0.0, "query_ms": 1.0,
                 "bytes_by_node": {"0": pool}, "vmstat": {"pgmigrate_success": 0}, "cpu_ticks": {}, "clk_tck": 100},
                {"src": "probe", "event": "sample", "i": 1, "t_ns": t0 + 10 * SEC, "t_s": 10.0, "query_ms": 1.0,
                 "bytes_by_node": {"0": pool // 2, "1": pool // 2}, "vmstat": {"pgmigrate_success": 2560},
                 "cpu_ticks": {}, "clk_tck": 100, "start": base, "runs": [[0, 2], [1, 2]]},
                {"src": "probe", "event": "truth", "i": 1, "t_ns": t0 + 10 * SEC,
                 "csv": truth_csv([(0, base, base + 8192, "active", t0 + 9 * SEC),
                                   (1, base + 8192, base + 16384, "cached", t0)])},
                {"src": "bench", "event": "done", "kvsim_status": 0},
            ]
            with open(os.path.join(d, "none.jsonl"), "w") as f:
                f.write("noise line\n" + "\n".join(json.dumps(e) for e in ev) + "\n")
            with open(os.path.join(d, "kvtier.jsonl"), "w") as f:
                f.write(json.dumps({"src": "bench", "event": "unavailable", "mode": "kvtier",
                                    "reason": "kvtierd runs but does not manage kvsim"}) + "\n")
            self.assertEqual(report.main([d, "--modes", "none,kvtier", "--no-plot"]), 0)
            with open(os.path.join(d, "report.md"), encoding="utf-8") as f:
                md = f.read()
            for col in report.COLUMNS:
                self.assertIn(col, md)
            self.assertIn("| kvtier | not available: kvtierd runs but does not manage kvsim |", md)
            # A start event without "threads" is an older kvsim's: one thread.
            self.assertIn("one thread (the kernel's NUMA scan leaves its DRAM pages mapped)", md)
            # The page map at 10 s: its precision, the most the bytes on node 1 allow, and no
            # episode split (this truth has no episode_start_ns column).
            self.assertIn("| 10 | 0.0 MiB | 0.0 MiB | 100.0% (100.0%) | 100.0% | n/a |", md)
            # The second half (from 5 s): 100 bytes read, 25 off node 0, 15 of them late.
            self.assertIn("- Reads not served by node 0 in the second half: 25.0% of 0 MiB read; 10.0% "
                          "within 5 s of the block's start of use (filled anew, or back after 10 s or more "
                          "untouched: what no placement that waits for an access can serve from DRAM), "
                          "15.0% later.", md)
            with open(os.path.join(d, "results.json"), encoding="utf-8") as f:
                res = {r["mode"]: r for r in json.load(f)}
            r = res["none"]
            self.assertEqual(r["share_cxl_end"], 0.5)
            self.assertEqual(r["dram_read_share"], 0.75)
            self.assertEqual(r["slow_reads_2nd_half"]["slow_early_bytes"], 10)
            self.assertEqual(r["final_score"]["precision"], 1.0)
            self.assertEqual(r["final_score"]["recall"], 1.0)
            self.assertAlmostEqual(r["migration"]["migrated_mib_s"], 1.0)
            self.assertEqual(r["corrupted_bytes"], 0)
            self.assertNotIn("share_cxl", res["kvtier"])
            # kvsim --idle-threads 3: the settings say so.
            ev[2]["threads"] = 4
            with open(os.path.join(d, "none.jsonl"), "w") as f:
                f.write("\n".join(json.dumps(e) for e in ev) + "\n")
            self.assertEqual(report.main([d, "--modes", "none,kvtier", "--no-plot"]), 0)
            with open(os.path.join(d, "report.md"), encoding="utf-8") as f:
                self.assertIn("4 threads (3 idle: --idle-threads).", f.read())


class OracleCheck(unittest.TestCase):
    def test_cold_chunks_since_the_last_clean_cycle_must_be_on_the_slow_node(self):
        base = 0x300000
        t = 100 * SEC
        rows = report.parse_truth_csv(truth_csv([
            (0, base, base + 8192, "cached", t - 30 * SEC),  # cold long before cycle 2: checked
            (1, base + 8192, base + 16384, "active", t - 1 * SEC),  # hot: not checked
            (2, base + 16384, base + 24576, "free", t - 12 * SEC),  # cold only after cycle 2's time
        ]))
        cycles = [
            {"i": 1, "t_ns": t - 8 * SEC, "t_end_ns": t - 7 * SEC, "backlog_bytes": 0},
            {"i": 2, "t_ns": t - 5 * SEC, "t_end_ns": t - 4 * SEC, "backlog_bytes": 0},
            {"i": 3, "t_ns": t - 3 * SEC, "t_end_ns": t - 2 * SEC, "backlog_bytes": 4096},  # left work
            {"i": 4, "t_ns": t - 1 * SEC, "t_end_ns": t + 1 * SEC, "backlog_bytes": 0},  # after the map
        ]
        pages = [1, 1, 0, 0, 0, 0]
        c = report.oracle_cold_check(cycles, base, pages, rows, t, 10 * SEC)
        self.assertEqual(c, {"cycle": 2, "checked_bytes": 8192, "misplaced_bytes": 0})
        # One of the checked pages on the fast node is a misplacement, counted exactly.
        c = report.oracle_cold_check(cycles, base, [1, 0, 0, 0, 0, 0], rows, t, 10 * SEC)
        self.assertEqual(c["misplaced_bytes"], 4096)
        # No clean cycle before the map: nothing to check.
        self.assertIsNone(report.oracle_cold_check(cycles[2:], base, pages, rows, t, 10 * SEC)["cycle"])


def mode_events(base, pool, t0, cxl_end_pages, dram_share, cold_age=10, cpu=None, extra=()):
    """A minimal completed run: two probe samples (the second a page map with truth), kvsim's
    events, `cxl_end_pages` of 4 pool pages on node 1 at the end, `dram_share` of reads on node 0."""
    runs = [[1, cxl_end_pages]] + ([[0, 4 - cxl_end_pages]] if cxl_end_pages < 4 else [])
    return [
        {"src": "bench", "event": "layout", "mode": "m", "kernel": "7.3.4+deb13-amd64", "memory_tiers": "t4: 0",
         "nodes": {"0": {"total_kib": 1024, "free_kib": 512}, "1": {"total_kib": 2048, "free_kib": 2048}}},
        {"src": "bench", "event": "settings", "cold_age_s": cold_age},
        {"src": "kvsim", "event": "start", "pool_bytes": pool, "pool": [base, base + pool],
         "trace": {"path": "/kvtier/traces/azure_llm_conv_2023.csv", "requests": 3}, "time_scale": 1.0,
         "scaled": "s", "sim": {"blocks": 2, "block_bytes": 8192, "step_ms": 960}},
        {"src": "kvsim", "event": "stats", "time_ns": t0 + 1 * SEC,
         "read_nodes": {"sampled_read_bytes": 0, "by_node": {}}},
        {"src": "kvsim", "event": "stats", "time_ns": t0 + 5 * SEC,
         "read_nodes": {"sampled_read_bytes": 100, "by_node": {"0": 100 * dram_share, "1": 100 * (1 - dram_share)}}},
        {"src": "kvsim", "event": "stats", "time_ns": t0 + 10 * SEC,
         "read_nodes": {"sampled_read_bytes": 200, "by_node": {"0": 200 * dram_share, "1": 200 * (1 - dram_share)}}},
        {"src": "kvsim", "event": "end", "steps_per_s": 1.0, "step_work_ms": 3.0, "tokens": 9,
         "corrupted_bytes": 0, "result": "ok"},
        {"src": "probe", "event": "sample", "i": 0, "t_ns": t0, "t_s": 0.0, "query_ms": 1.0,
         "bytes_by_node": {"0": pool}, "vmstat": {}, "cpu_ticks": cpu or {}, "clk_tck": 100},
        {"src": "probe", "event": "sample", "i": 1, "t_ns": t0 + 10 * SEC, "t_s": 10.0, "query_ms": 1.0,
         "bytes_by_node": {"1": cxl_end_pages * 4096, "0": (4 - cxl_end_pages) * 4096}, "vmstat": {},
         "cpu_ticks": {k: v * 2 for k, v in (cpu or {}).items()}, "clk_tck": 100, "start": base, "runs": runs},
        {"src": "probe", "event": "truth", "i": 1, "t_ns": t0 + 10 * SEC,
         "csv": truth_csv([(0, base, base + 8192, "cached", t0 - 30 * SEC),
                           (1, base + 8192, base + 16384, "active", t0 + 9 * SEC)])},
        {"src": "bench", "event": "done", "kvsim_status": 0},
    ] + list(extra)


def write_run(d, mode, k, events, meta=None):
    with open(os.path.join(d, f"{mode}-{k}.jsonl"), "w") as f:
        f.write("\n".join(json.dumps(e) for e in events) + "\n")
    with open(os.path.join(d, f"{mode}-{k}.meta.json"), "w") as f:
        json.dump(dict({"mode": mode, "run": k, "kernel": "7.3", "trace": "azure-conv",
                        "trace_file": "azure_llm_conv_2023.csv", "duration_s": 10}, **(meta or {})), f)


class Repeats(unittest.TestCase):
    def test_spread_and_its_formatting(self):
        self.assertEqual(report.spread([0.3, None, 0.1, 0.2]), {"median": 0.2, "min": 0.1, "max": 0.3, "n": 3})
        self.assertIsNone(report.spread([None]))
        self.assertEqual(report.stat(report.spread([0.5])), "50.0%")
        self.assertEqual(report.stat(report.spread([0.1, 0.2, 0.3])), "20.0% (10.0–30.0)")
        self.assertEqual(report.stat(None), "n/a")

    def test_medians_ranges_and_the_oracle_run_by_run(self):
        base, pool, t0 = 0x400000, 4 * 4096, 1000 * SEC
        with tempfile.TemporaryDirectory() as d:
            # The oracle: 2 pages of 4 on node 1 at the end in both runs, DRAM reads 90% / 80%.
            write_run(d, "oracle", 1, mode_events(base, pool, t0, 2, 0.9, cpu={"kvtier_oracle": 100}))
            write_run(d, "oracle", 2, mode_events(base, pool, t0, 2, 0.8, cpu={"kvtier_oracle": 300}))
            # A mode with three runs: 1, 2 and 4 pages on node 1; DRAM reads 50%, 70%, 60%.
            for k, (pages, share) in enumerate([(1, 0.5), (2, 0.7), (4, 0.6)], start=1):
                write_run(d, "damos-goal", k, mode_events(base, pool, t0, pages, share, cpu={"kdamond.0": 10 * k}))
            # A mode whose second run failed.
            write_run(d, "kvtier", 1, mode_events(base, pool, t0, 2, 0.9))
            write_run(d, "kvtier", 2, [{"src": "bench", "event": "error", "mode": "kvtier", "what": "boom"}])
            self.assertEqual(report.main([d, "--modes", "none,damos-goal,oracle,kvtier", "--no-plot"]), 0)
            with open(os.path.join(d, "results.json"), encoding="utf-8") as f:
                res = {r["mode"]: r for r in json.load(f)}
            with open(os.path.join(d, "report.md"), encoding="utf-8") as f:
                md = f.read()
        g = res["damos-goal"]
        self.assertEqual(len(g["runs"]), 3)
        self.assertEqual(g["summary"]["cxl_end"], {"median": 0.5, "min": 0.25, "max": 1.0, "n": 3})
        self.assertAlmostEqual(g["summary"]["dram_2nd"]["median"], 0.6)
        # Run K against oracle run K: offload 0.25/0.5, 0.5/0.5; run 3 (no oracle run 3) against
        # the oracle's median (0.5): 1.0/0.5. DRAM reads: 50-90, 70-80, 60-85 points.
        self.assertEqual(g["vs_oracle"]["offload_ratio"], {"median": 1.0, "min": 0.5, "max": 2.0, "n": 3})
        self.assertAlmostEqual(g["vs_oracle"]["dram_delta_pts"]["median"], -25.0)
        self.assertAlmostEqual(g["vs_oracle"]["dram_delta_pts"]["min"], -40.0)
        self.assertAlmostEqual(g["vs_oracle"]["dram_delta_pts"]["max"], -10.0)
        # The oracle's own CPU is excluded from the agent column and reported apart: 1 s and 3 s
        # over 10 s windows.
        o = res["oracle"]
        self.assertEqual(o["summary"]["agent_cpu_pct"]["median"], 0)
        self.assertAlmostEqual(o["summary"]["excluded_cpu_pct"]["median"], 20.0)
        self.assertIn("excluded (the oracle itself: 20.0% (10.0–30.0) of a CPU, not counted)", md)
        # The failed run shows in the row and in the run list; the medians use the completed one.
        self.assertEqual(res["kvtier"]["summary"]["cxl_end"]["n"], 1)
        self.assertIn("kvtier (1 of 2 runs)", md)
        self.assertIn("kvtier, run 2: failed: boom", md)
        self.assertIn("| no tiering | failed:", md)
        self.assertIn("1.00 (0.50–2.00) / -25.0 pts (-40.0 to -10.0)", md)
        # The report names the trace and the kernel.
        self.assertIn("trace **azure-conv** (`azure_llm_conv_2023.csv`)", md)
        self.assertIn("guest kernel **7.3.4+deb13-amd64**", md)
        self.assertIn("3 runs of each mode", md)

    def test_the_workloads_price_per_step_and_against_none_run_by_run(self):
        base, pool, t0 = 0x400000, 4 * 4096, 1000 * SEC

        def priced(cpu_ticks, sys_ticks, faults, steps, step_ms=960):
            ev = mode_events(base, pool, t0, 2, 0.9)
            stats = [e for e in ev if e.get("event") == "stats"]
            stats[0]["steps"], stats[1]["steps"], stats[2]["steps"] = 5, 5 + steps // 2, 5 + steps
            samples = [e for e in ev if e.get("event") == "sample"]
            samples[0].update({"cpu_ticks": {"kvsim": 100}, "sys_ticks": {"kvsim": 40},
                               "minflt": {"kvsim": 1000}})
            samples[1].update({"cpu_ticks": {"kvsim": 100 + cpu_ticks}, "sys_ticks": {"kvsim": 40 + sys_ticks},
                               "minflt": {"kvsim": 1000 + faults}})
            next(e for e in ev if e.get("event") == "start")["sim"]["step_ms"] = step_ms
            return ev

        r = report.analyse_mode("kvtier", priced(300, 200, 5000, 10), {"run": 1})
        # 3 s of CPU (1 s user, 2 s system) over the 10 steps between the two samples.
        self.assertAlmostEqual(r["kvsim_user_s"], 1.0)
        self.assertAlmostEqual(r["kvsim_sys_s"], 2.0)
        self.assertEqual(r["kvsim_steps"], 10)
        self.assertAlmostEqual(r["kvsim_cpu_ms_per_step"], 300.0)
        f = report.figures(r)
        self.assertAlmostEqual(f["kvsim_sys_ms_step"], 200.0)
        self.assertAlmostEqual(f["kvsim_faults_step"], 500.0)
        self.assertIn("kvsim 3.00 s of CPU over 10 decode steps (1.00 s user, 2.00 s system), 500 minor faults a step",
                      report.price_md(r))
        with tempfile.TemporaryDirectory() as d:
            write_run(d, "none", 1, priced(100, 50, 100, 10))
            write_run(d, "none", 2, priced(200, 50, 100, 10))
            write_run(d, "kvtier", 1, priced(150, 100, 900, 10))
            write_run(d, "kvtier", 2, priced(200, 100, 900, 10))
            self.assertEqual(report.main([d, "--modes", "none,kvtier", "--no-plot"]), 0)
            with open(os.path.join(d, "results.json"), encoding="utf-8") as fh:
                res = {a["mode"]: a for a in json.load(fh)}
            with open(os.path.join(d, "report.md"), encoding="utf-8") as fh:
                md = fh.read()
        # Run 1 against none's run 1 (150/100), run 2 against run 2 (200/200).
        self.assertEqual(res["kvtier"]["vs_none"]["cpu_ratio"], {"median": 1.25, "min": 1.0, "max": 1.5, "n": 2})
        self.assertIn("175.0 (150.0–200.0) (75.0 + 100.0), 1.25x (1.00–1.50)", md)
        self.assertNotIn("x of none", md, "paced runs: no throughput ratio")
        # Flat out (step_ms 0): steps/s and the tokens decoded, each as a ratio of none's too.
        with tempfile.TemporaryDirectory() as d:
            write_run(d, "none", 1, priced(100, 50, 100, 10, step_ms=0))
            write_run(d, "kvtier", 1, priced(150, 100, 900, 10, step_ms=0))
            self.assertEqual(report.main([d, "--modes", "none,kvtier", "--no-plot"]), 0)
            with open(os.path.join(d, "report.md"), encoding="utf-8") as fh:
                self.assertIn("(3.0), 1.00x of none; tokens 1.00x of none |", fh.read())

    def test_one_line_for_the_demo(self):
        base, pool, t0 = 0x400000, 4 * 4096, 1000 * SEC
        r = report.analyse_mode("kvtier", mode_events(base, pool, t0, 2, 0.75), {"run": 1})
        line = report.one_line(r)
        self.assertTrue(line.startswith("KV on CXL node: start / mean / end: 0.0% / 25.0% / 50.0%; "), line)
        self.assertIn("KV reads from DRAM (whole run / 2nd half): 75.0% / 75.0%", line)
        self.assertIn("corrupted bytes: 0", line)
        self.assertNotIn("vs oracle", line)
        self.assertNotIn("the price", line)  # no kvtierctl status: nothing made up

    def test_the_demos_price_by_kvtierds_own_count(self):
        base, pool, t0 = 0x400000, 4 * 4096, 1000 * SEC
        status = {"uptime_seconds": 80.0, "loop": {"cpu": {
            "loop_seconds": 3.0, "process_seconds": 4.0,
            "loop_seconds_by_phase": {"discover": 0.5, "sources": 1.0, "move": 1.0, "record": 0.5}}}}
        events = mode_events(base, pool, t0, 2, 0.75, extra=[{"src": "bench", "event": "kvtierd_status", "status": status}])
        line = report.one_line(report.analyse_mode("kvtier", events, {"run": 1}))
        self.assertTrue(line.endswith("; the price by kvtierd's own count (kvtierctl status): 5.0% of a CPU, "
                                      "moving pages 25.0% of it"), line)
        status["loop"]["cpu"]["loop_seconds_by_phase"]["move"] = 0.0
        self.assertAlmostEqual(report.kvtierd_own_cpu({"status": status})["move_share"], 0.0)
        self.assertIsNone(report.kvtierd_own_cpu({"status": {"uptime_seconds": 0, "loop": status["loop"]}}))
        self.assertIsNone(report.kvtierd_own_cpu({"status": {}}))
        self.assertIsNone(report.kvtierd_own_cpu(None))


if __name__ == "__main__":
    unittest.main()
