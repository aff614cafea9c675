#!/usr/bin/env python3
"""Unit tests of gpu_checks.py's verdicts that the simulated device cannot
reach (PyTorch's leak, out-of-memory, time and pool checks), on small
reports and traces written here; the route and sample checks run on real
traces in ctest gpu.check_on_sim. Run: python3 gpu_checks_test.py"""
import json
import os
import subprocess
import sys
import tempfile
import unittest


def read(path):
    with open(path) as f:
        return json.load(f)

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_checks.py")


class GpuChecks(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, value, lines=False):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            if lines:
                f.writelines(json.dumps(v) + "\n" for v in value)
            else:
                json.dump(value, f)
        return path

    def check(self, *args):
        r = subprocess.run([sys.executable, CHECKS, *args], capture_output=True, text=True)
        return r.returncode, r.stdout.strip()

    def test_growth_names_the_python_site(self):
        report = {"iterations": {"source": "marks"}, "growth": [{
            "functions": ["c10::alloc", "py::compute_loss:/x/torch_train.py", "py::main:/x/torch_train.py"],
            "bytes_per_iteration": 512, "iterations": 99}]}
        rc, out = self.check("growth", "--report", self.write("r.json", report), "--function", "compute_loss")
        self.assertEqual(rc, 0, out)
        self.assertIn("512 B/iteration over 99 iterations at py::compute_loss", out)
        rc, out = self.check("growth", "--report", self.write("r.json", report), "--function", "train_step")
        self.assertEqual(rc, 1, out)
        report["growth"] = []
        rc, out = self.check("growth", "--report", self.write("r.json", report), "--function", "compute_loss")
        self.assertEqual((rc, out.startswith("no growth leak")), (1, True), out)

    def test_growth_with_python_frames_needs_the_line(self):
        frames = [{"ip": "0x1", "fn": "c10::alloc", "module": "/t/libc10_cuda.so", "off": "0x1"},
                  {"py": True, "fn": "compute_loss", "file": "/x/torch_train.py", "line": 79},
                  {"py": True, "fn": "main", "file": "/x/torch_train.py", "line": 121}]
        report = {"iterations": {"source": "marks"}, "growth": [{
            "functions": ["c10::alloc", "compute_loss", "main"], "frames": frames,
            "bytes_per_iteration": 512, "iterations": 99}]}
        rc, out = self.check("growth", "--report", self.write("r.json", report), "--function", "compute_loss",
                             "--python-file", "torch_train.py")
        self.assertEqual(rc, 0, out)
        self.assertIn("(torch_train.py:79)", out)
        frames[1]["line"] = None
        rc, out = self.check("growth", "--report", self.write("r.json", report), "--function", "compute_loss",
                             "--python-file", "torch_train.py")
        self.assertEqual(rc, 1, out)

    def test_python_lines_at_the_peak(self):
        site = lambda fn, line: {"frames": [{"ip": "0x1", "fn": None, "module": "/t/libtorch.so", "off": "0x1"},
                                            {"py": True, "fn": fn, "file": "/x/torch_train.py", "line": line}]}
        report = {"top_at_peak": [site("TinyModel.forward", 66), site("compute_loss", 79)]}
        args = ["python-lines", "--report", self.write("r.json", report), "--python-file", "torch_train.py",
                "--function", "forward", "--function", "compute_loss"]
        rc, out = self.check(*args)
        self.assertEqual(rc, 0, out)
        self.assertIn("forward (torch_train.py:66)", out)
        rc, out = self.check(*args, "--function", "step")
        self.assertEqual(rc, 1, out)
        self.assertIn("no Python frame of step", out)

    def test_oom_needs_an_explained_capacity_event_for_the_request(self):
        samples = self.write("s.json", {"oom_request": 1000})
        event = {"size": 2 << 20, "cause": "capacity", "sentence": "asked 2 MiB, 0 B free"}
        report = {"ooms": 1, "oom_events": [event]}
        rc, out = self.check("oom", "--report", self.write("r.json", report), "--samples", samples)
        self.assertEqual(rc, 0, out)
        self.assertIn("asked 2 MiB", out)
        event["cause"] = "fragmentation"
        rc, out = self.check("oom", "--report", self.write("r.json", report), "--samples", samples)
        self.assertEqual(rc, 1, out)
        event.update(cause="capacity", size=999)
        rc, out = self.check("oom", "--report", self.write("r.json", report), "--samples", samples)
        self.assertEqual(rc, 1, out)

    def test_time_against_the_mean_of_the_baselines(self):
        base1 = self.write("b1.json", {"median_step_seconds": 0.010})
        base2 = self.write("b2.json", {"median_step_seconds": 0.012})
        fast = self.write("t1.json", {"median_step_seconds": 0.0111})
        slow = self.write("t2.json", {"median_step_seconds": 0.0113})
        rc, out = self.check("time", "--base", base1, "--base", base2, "--traced", fast, "--goal", "0.02")
        self.assertEqual(rc, 0, out)
        self.assertIn("+0.91%", out)
        rc, out = self.check("time", "--base", base1, "--base", base2, "--traced", slow, "--goal", "0.02")
        self.assertEqual(rc, 1, out)

    def test_time_step_by_step_when_the_runs_draw_the_same_shapes(self):
        def run(name, scale, shapes=None):
            steps = [{"step": i, "batch": 8 + i % 5, "length": 64, "seconds": (0.010 + 0.002 * (i % 5)) * scale}
                     for i in range(40)]
            if shapes:
                steps[30]["batch"] = 99
            return self.write(name, {"median_step_seconds": 0.014 * scale, "samples": steps})
        base1, base2 = run("b1.json", 1.0), run("b2.json", 1.0)
        # Medians alone would say +3%; every step is 1.5% slower.
        traced = self.write("t.json", {**read(run("t.json", 1.015)), "median_step_seconds": 0.01442})
        rc, out = self.check("time", "--base", base1, "--base", base2, "--traced", traced, "--goal", "0.02")
        self.assertEqual(rc, 0, out)
        self.assertIn("step by step: +1.50%", out)
        rc, out = self.check("time", "--base", base1, "--base", base2, "--traced", traced, "--goal", "0.01")
        self.assertEqual(rc, 1, out)
        # Other shapes: only the medians can be compared.
        other = run("o.json", 1.015, shapes=True)
        rc, out = self.check("time", "--base", base1, "--base", base2, "--traced", other, "--goal", "0.02")
        self.assertNotIn("; step by step", out)
        self.assertEqual(rc, 0, out)

    def test_peak_reserved_against_pytorch(self):
        samples = self.write("s.json", {"max_reserved": 1000})
        report = {"devices": {"0": {"peak_reserved": 1000, "peak_allocated": 900}}}
        rc, out = self.check("peak-reserved", "--samples", samples, "--report", self.write("r.json", report))
        self.assertEqual(rc, 0, out)
        report["devices"]["0"]["peak_reserved"] = 1001
        rc, out = self.check("peak-reserved", "--samples", samples, "--report", self.write("r.json", report))
        self.assertEqual(rc, 1, out)

    def test_samples_rounding_apis_and_at_least(self):
        trace = [
            {"ev": "alloc", "t": 1, "api": "cudaMalloc", "kind": "device", "ptr": "0x1", "size": 100},
            {"ev": "alloc", "t": 2, "api": "cuMemAlloc_v2", "kind": "device", "ptr": "0x2", "size": 4096},
            {"ev": "mark", "t": 3, "name": "sample 0", "kind": "instant"},
            {"ev": "free", "t": 4, "api": "cudaFree", "kind": "device", "ptr": "0x1", "size": 100},
            {"ev": "mark", "t": 5, "name": "sample 1", "kind": "instant"},
        ]
        t = self.write("t.jsonl", trace, lines=True)
        s = self.write("s.json", {"samples": [{"step": 0, "allocated": 512}, {"step": 1, "allocated": 0}]})
        common = ["samples", "--samples", s, "--trace", t, "--key", "allocated", "--ours", "alloc"]
        rc, out = self.check(*common, "--api", "cudaMalloc", "--round", "512")
        self.assertEqual(rc, 0, out)
        self.assertIn("other apis at the end: {'cuMemAlloc_v2': 4096}", out)
        rc, out = self.check(*common, "--api", "cudaMalloc")  # 100 B unrounded
        self.assertEqual(rc, 1, out)
        rc, out = self.check(*common, "--relation", "ge")  # all apis: 4608 >= 512
        self.assertEqual(rc, 0, out)
        rc, out = self.check(*common)  # all apis, equal: no
        self.assertEqual(rc, 1, out)
        rc, out = self.check(*common, "--relation", "ge", "--min-samples", "3")
        self.assertEqual(rc, 1, out)
        self.assertEqual(self.check(*common, "--relation", "ge", "--min-bytes", "4096")[0], 0)
        rc, out = self.check(*common, "--relation", "ge", "--min-bytes", "4097")
        self.assertEqual(rc, 1, out)
        self.assertIn("only 4096 B live at the last sample", out)

    def test_samples_expect_how_the_program_ran(self):
        t = self.write("t.jsonl", [{"ev": "mark", "t": 1, "name": "sample 0", "kind": "instant"}], lines=True)
        s = self.write("s.json", {"allocator_backend": "native", "samples": [{"step": 0, "allocated": 0}]})
        common = ["samples", "--samples", s, "--trace", t, "--key", "allocated", "--ours", "alloc"]
        self.assertEqual(self.check(*common, "--expect", "allocator_backend=native")[0], 0)
        rc, out = self.check(*common, "--expect", "allocator_backend=cudaMallocAsync")
        self.assertEqual(rc, 1, out)
        self.assertIn("allocator_backend='native'", out)


if __name__ == "__main__":
    unittest.main()
