#!/usr/bin/env python3
"""Unit tests of bench/llama_report.py: one run's figures from kvtier_llama_load's lines (hot
bytes on node 1 after the warm-up, the offload at the end, TTFT percentiles, decode tokens/s,
CPU per token, the rates of requests that ran alone, kvtierd's totals) and a whole report with ratios and integrity against none."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import llama_report  # noqa: E402

MIB = 1 << 20


def truth(t, active1, idle1, unused1, rest=MIB):
    return {"type": "truth", "t": t,
            "active": {"0": rest, "1": active1, "other": 0},
            "idle": {"0": rest, "1": idle1, "other": 0},
            "unused": {"0": rest, "1": unused1, "other": 0}}


def request(t, ttft, n, ms, status="ok"):
    return {"type": "request", "t": t, "status": status, "ttft_s": ttft, "predicted_n": n,
            "predicted_ms": ms, "decode_tps": n / ms * 1000 if ms else 0, "cache_n": 4}


def lines(active1, decode_ms, integrity_text):
    return [
        truth(10, 8 * MIB, 0, 0),  # in the warm-up: left out of the average
        truth(20, active1, 0, 0),
        truth(30, 3 * active1, MIB, 3 * MIB),
        request(5, 1.0, 8, decode_ms),
        request(15, 3.0, 8, decode_ms),
        request(25, 2.0, 0, 0, status="timeout"),
        {"type": "bench", "event": "cpu", "clk_tck": 100, "server_ticks": 160,
         "kvtierd_ticks": 50, "kvtierd_gone": 0},
        {"type": "bench", "event": "numa_maps", "node0_bytes": 10 * MIB, "node1_bytes": 12 * MIB},
        {"type": "integrity", "i": 0, "status": "ok", "content": integrity_text, "tokens": "1,2"},
    ]


class Summary(unittest.TestCase):
    def test_one_run(self):
        r = llama_report.summarize(lines(2 * MIB, 2000, "x"), warmup=20)
        self.assertEqual((r["requests"], r["ok"], r["failed"], r["timeouts"]), (3, 2, 1, 1))
        self.assertEqual(r["hot_on_node1_bytes"], 4 * MIB)  # mean of 2 and 6 MiB
        self.assertEqual(r["hot_bytes"], 5 * MIB)  # mean of 3 and 7 MiB
        self.assertAlmostEqual(r["offload_share"], 4 / 6)  # (1 + 3) of (1+1 + 1+3) MiB
        self.assertEqual(r["ttft_p50_s"], 2.0)
        self.assertAlmostEqual(r["ttft_p99_s"], 2.98)
        self.assertEqual(r["decode_tps"], 4.0)  # 16 tokens in 4 s
        self.assertEqual(r["server_cpu_ms_per_token"], 100.0)  # 1.6 s for 16 tokens
        self.assertEqual(r["kvtierd_cpu_s"], 0.5)
        self.assertEqual(r["other_on_node1_end"], 12 * MIB - (6 + 1 + 3) * MIB)
        self.assertEqual(r["integrity"], [("x", "1,2")])
        self.assertEqual(r["buffer_back_to_node0"], 8 * MIB - 2 * MIB)  # 8 -> 2 -> 10 MiB on node 1

    def test_alone_rates_count_only_requests_with_no_other_in_flight(self):
        def req(t, wall, n, ms, prompt_n, prompt_ms):
            r = request(t, 0.1, n, ms)
            r.update({"wall_s": wall, "prompt_n": prompt_n, "prompt_ms": prompt_ms})
            return r
        ok = [req(0, 2, 5, 40, 10, 50),    # alone: 4 tokens after the first in 40 ms
              req(3, 2, 9, 800, 20, 500),  # overlaps the next one
              req(4, 2, 9, 800, 20, 500),
              req(10, 1, 3, 20, 30, 90)]   # alone: 2 tokens in 20 ms
        r = llama_report.alone_rates(ok)
        self.assertEqual(r["alone_requests"], 2)
        self.assertAlmostEqual(r["alone_decode_ms_per_token"], 60 / 6)
        self.assertAlmostEqual(r["alone_prompt_ms_per_token"], 140 / 40)
        self.assertIsNone(llama_report.alone_rates([])["alone_decode_ms_per_token"])

    def test_paired_ratios_compare_the_same_requests(self):
        def req(conv, turn, t, wall, ttft, n, ms):
            r = request(t, ttft, n, ms)
            r.update({"conv": conv, "turn": turn, "wall_s": wall})
            return r
        base = [req(1, 0, 0, 1, 0.5, 5, 40),     # overlaps (1, 1) in the base run
                req(1, 1, 0.5, 1, 0.2, 3, 20),
                req(2, 0, 30, 1, 0.1, 1, 0),     # alone, steady, one token: no decode figure
                req(3, 0, 40, 1, 0.4, 9, 80)]    # alone, steady
        run = [req(1, 0, 0, 1, 1.0, 5, 80),      # twice the TTFT, half the decode speed
               req(1, 1, 0.6, 1, 0.2, 3, 20),
               req(2, 0, 30, 1, 0.3, 1, 0),
               req(3, 0, 40.2, 1, 0.4, 9, 40),   # twice the decode speed
               req(4, 0, 50, 1, 0.4, 9, 40)]     # not in the base run
        p = llama_report.paired_ratios(run, base, warmup=20)
        self.assertEqual((p["pairs"], p["unpaired"]), (4, 1))
        self.assertAlmostEqual(p["send_skew_s"], 0.2)
        self.assertEqual(p["ttft_all"], 1.5)  # median of 2, 1, 3, 1
        self.assertEqual(p["decode_all"], 1.0)  # median of 0.5, 1, 2
        self.assertAlmostEqual(p["ttft_steady"], 2.0)  # median of 3 and 1
        self.assertEqual(p["n_ttft_steady"], 2)
        self.assertEqual((p["decode_steady"], p["n_decode_steady"]), (2.0, 1))
        self.assertEqual((p["decode_alone"], p["n_decode_alone"]), (2.0, 1))
        self.assertIsNone(llama_report.paired_ratios([], base, 20)["decode_all"])

    def test_throughput_over_the_wall_time_of_the_schedule(self):
        ok = [dict(request(0, 0.1, 4, 30), wall_s=2), dict(request(6, 0.1, 6, 30), wall_s=4)]
        self.assertEqual(llama_report.throughput(ok), 1.0)  # 10 tokens from 0 to 10 s

    def test_kvtierd_totals_summed_over_groups(self):
        status = {"feedback": [
            {"group": "a", "effective_cold_age_s": 15.0, "demoted_bytes": 3, "promoted_bytes": 2,
             "misdemoted_bytes": 1, "kernel_promoted_bytes": 0},
            {"group": "b", "effective_cold_age_s": 15.0, "demoted_bytes": 4, "promoted_bytes": 0,
             "misdemoted_bytes": 0, "kernel_promoted_bytes": 5}]}
        t = llama_report.feedback_totals({"groups": status})
        self.assertEqual((t["demoted_bytes"], t["promoted_bytes"], t["misdemoted_bytes"],
                          t["kernel_promoted_bytes"], t["cold_age_s"]), (7, 2, 1, 5, 15.0))


    def test_where_time_goes_sums_the_windows_of_requests_alone_in_both_runs(self):
        def req(conv, t, wall, win):
            r = request(t, 0.1, 2, 10)
            r.update({"conv": conv, "turn": 0, "wall_s": wall, "win": win})
            return r

        def win(server, delay, watch, busy, idle, migrated):
            return {"server_cpu_ms": server, "server_delay_ms": delay, "watch_cpu_ms": watch,
                    "self_cpu_ms": 1, "busy_ms": busy, "idle_ms": idle,
                    "vm": {"pgmigrate_success": migrated}}
        base = [req(1, 0, 1.0, win(900, 10, 0, 910, 90, 0)),
                req(2, 10, 1.0, win(900, 10, 0, 910, 90, 0)),
                req(3, 20, 1.0, win(900, 10, 0, 910, 90, 0)),
                req(4, 20.5, 1.0, win(900, 10, 0, 910, 90, 0))]  # 3 and 4 overlap: left out
        run = [req(1, 0, 1.5, win(950, 300, 400, 1400, 100, 256)),
               req(2, 10, 1.2, win(900, 150, 200, 1120, 80, 64)),
               req(3, 20, 1.0, win(900, 10, 0, 910, 90, 0)),
               req(4, 30, 1.0, win(900, 10, 0, 910, 90, 0))]
        w = llama_report.where_time_goes(run, base)
        a, b = w["run"], w["base"]
        self.assertEqual((a["requests"], b["requests"]), (2, 2))
        self.assertAlmostEqual(a["wall_ms"] - b["wall_ms"], 700)
        self.assertEqual(a["watch_cpu_ms"], 600)
        self.assertEqual(a["server_cpu_ms"] - b["server_cpu_ms"], 50)
        self.assertEqual(a["other_ms"], (1400 - 950 - 400 - 1) + (1120 - 900 - 200 - 1))
        self.assertEqual(b["other_ms"], 2 * 9)
        self.assertEqual(a["pgmigrate_success"], 320)

class Report(unittest.TestCase):
    def test_ratios_and_integrity_against_none(self):
        with tempfile.TemporaryDirectory() as out:
            for mode, decode_ms, text in (("none", 2000, "x"), ("kvtier", 4000, "y")):
                with open(os.path.join(out, f"{mode}-1.jsonl"), "w", encoding="utf-8") as f:
                    f.write("\n".join(json.dumps(x) for x in lines(MIB, decode_ms, text)) + "\n")
                with open(os.path.join(out, f"{mode}-1.meta.json"), "w", encoding="utf-8") as f:
                    json.dump({"mode": mode, "run": 1, "why": ""}, f)
            sys.argv = ["llama_report.py", out]
            self.assertEqual(llama_report.main(), 0)
            with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
                runs = {r["mode"]: r for r in json.load(f)}
            self.assertEqual(runs["kvtier"]["vs_none"]["decode_tps"], 0.5)
            self.assertIn("paired", runs["kvtier"]["vs_none"])
            self.assertNotIn("ok_requests", runs["kvtier"])
            self.assertFalse(runs["kvtier"]["vs_none"]["integrity_identical"])
            with open(os.path.join(out, "report.md"), encoding="utf-8") as f:
                md = f.read()
            self.assertIn("DIFFERS", md)
            self.assertIn("| 1 | none | 3 (1) |", md)
            self.assertIn("Where the time goes", md)


if __name__ == "__main__":
    unittest.main()
