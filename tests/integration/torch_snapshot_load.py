#!/usr/bin/python3
"""Python's own pickle module reads `cumemtrace export --format torch-snapshot`
and finds the structure PyTorch's memory_viz (torch/utils/viz/MemoryViz.js)
reads: Debian's python3 has no torch, so the checks are written here from
MemoryViz.js (annotate_snapshot, process_alloc_data, MemoryView) and
torch/csrc/cuda/memory_snapshot.cpp.

  torch_snapshot_load.py CUMEMTRACE TRACE...

Each trace is exported, then `pickletools.dis` walks the opcodes (it fails
on a stack left unbalanced at STOP or a memo fetch before its put), and an
Unpickler that refuses every global loads it.
"""
import io
import pickle
import pickletools
import subprocess
import sys
import tempfile


class NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} in a snapshot")


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_frames(frames, where):
    expect(isinstance(frames, list), f"{where}: frames is not a list")
    for f in frames:
        # MemoryViz.js's frameFilter calls name.includes() and
        # filename.includes(): both must be strings.
        expect(isinstance(f, dict) and set(f) == {"name", "filename", "line"}, f"{where}: frame {f!r}")
        expect(isinstance(f["name"], str) and isinstance(f["filename"], str), f"{where}: frame {f!r}")
        expect(is_int(f["line"]), f"{where}: frame line {f!r}")


def check(snapshot, trace):
    expect(isinstance(snapshot, dict), "not a dict")
    expect(isinstance(snapshot.get("segments"), list), "no segments list")
    expect(isinstance(snapshot.get("device_traces"), list), "no device_traces list")
    segment_keys = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                    "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
    at_end = {}
    for i, seg in enumerate(snapshot["segments"]):
        where = f"{trace}: segments[{i}]"
        expect(set(seg) == segment_keys, f"{where}: keys {sorted(seg)}")
        expect(seg["segment_type"] in ("large", "small"), where)
        expect(seg["segment_pool_id"] == (0, 0), where)
        check_frames(seg["frames"], where)
        # annotate_snapshot: each block's address is the one before plus its size.
        addr = seg["address"]
        for j, b in enumerate(seg["blocks"]):
            expect(set(b) == {"address", "size", "requested_size", "state", "frames"}, f"{where}.blocks[{j}]")
            expect(b["address"] == addr, f"{where}.blocks[{j}]: address {b['address']} != {addr}")
            expect(b["state"] in ("active_allocated", "inactive"), f"{where}.blocks[{j}]: state")
            expect(0 <= b["requested_size"] <= b["size"], f"{where}.blocks[{j}]: sizes")
            check_frames(b["frames"], f"{where}.blocks[{j}]")
            addr += b["size"]
        expect(addr == seg["address"] + seg["total_size"], f"{where}: blocks do not tile the segment")
        at_end[(seg["device"], seg["address"])] = seg["total_size"]
    entries = 0
    for dev, events in enumerate(snapshot["device_traces"]):
        expect(isinstance(events, list), f"device_traces[{dev}]")
        segments, blocks = {}, {}
        for i, e in enumerate(events):
            where = f"{trace}: device_traces[{dev}][{i}]"
            entries += 1
            action = e["action"]
            expect(is_int(e["size"]) and is_int(e["stream"]) and is_int(e["time_us"]), where)
            if "frames" in e:
                check_frames(e["frames"], where)
            if action == "oom":
                expect(is_int(e["device_free"]), where)
                continue
            if action == "snapshot":
                continue
            addr = e["addr"]
            if action == "segment_alloc":
                segments[addr] = e["size"]
            elif action == "segment_free":
                expect(segments.pop(addr, None) == e["size"], f"{where}: segment_free of no segment")
            elif action == "alloc":
                # MemoryView's find_segment must find the block's segment.
                inside = [a for a, n in segments.items() if a <= addr and addr + e["size"] <= a + n]
                expect(inside, f"{where}: alloc in no segment")
                blocks[addr] = e["size"]
            elif action == "free_requested":
                nxt = events[i + 1]
                expect(nxt["action"] == "free_completed" and nxt["addr"] == addr, f"{where}: no free_completed next")
            elif action == "free_completed":
                expect(blocks.pop(addr, None) is not None, f"{where}: free of no block")
            else:
                raise AssertionError(f"{where}: action {action}")
        for addr, size in segments.items():
            expect(at_end.get((dev, addr)) == size, f"{trace}: segment {addr:#x} missing from segments")
    return entries


def main():
    cli, traces = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        for trace in traces:
            out = f"{tmp}/out.pickle"
            subprocess.run([cli, "export", trace, "--format", "torch-snapshot", "-o", out], check=True,
                           stderr=subprocess.DEVNULL)
            data = open(out, "rb").read()
            pickletools.dis(data, out=io.StringIO())
            entries = check(NoGlobals(io.BytesIO(data)).load(), trace)
            print(f"{trace}: {len(data)} bytes, {entries} entries: read by Python's pickle as memory_viz reads it")


if __name__ == "__main__":
    main()
