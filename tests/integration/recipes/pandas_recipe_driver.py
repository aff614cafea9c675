"""Runs README.md's pandas recipe (its code block, extracted by
recipes_test.cpp into RECIPE) on each TRACE and prints, as JSON, what it
says per trace: {"devices": {dev: [peak_allocated, leaked_bytes]},
"peak_allocated": N, "leaked_bytes": N}.

    /usr/bin/python3 pandas_recipe_driver.py RECIPE TRACE...
"""
import json
import sys

recipe = {}
with open(sys.argv[1]) as f:
    exec(compile(f.read(), "README.md (pandas recipe)", "exec"), recipe)
pd = recipe["pd"]
results = {}
for path in sys.argv[2:]:
    ev = pd.read_json(path, lines=True)  # as README.md reads a trace
    per_device, peak_allocated, leaked_bytes = recipe["summary"](ev)
    over_time = recipe["allocated_over_time"](ev)
    results[path] = {
        "devices": {str(dev): [int(row.peak_allocated), int(row.leaked_bytes)]
                    for dev, row in per_device.iterrows()},
        "peak_allocated": peak_allocated,
        "leaked_bytes": leaked_bytes,
        # The highest point of the series README plots, per device.
        "over_time_max": {str(dev): int(v) for dev, v in over_time.groupby("dev")["allocated"].max().items()},
    }
json.dump(results, sys.stdout)
