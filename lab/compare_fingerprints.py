"""Compares two folders of run fingerprints (lab/fingerprint_configs.sh), run by run.

    python lab/compare_fingerprints.py BEFORE_DIR AFTER_DIR

Prints one line per run: whether its checkpoints' tensors, its results.json and each
TensorBoard series are identical, naming any series that differs. The operative
config's text is compared apart, since renamed bindings change it and nothing else.
Exit status 1 if anything but the operative config differs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def compare(before: dict, after: dict) -> tuple[list[str], bool]:
    """(the parts that differ, apart from the operative config; whether it differs)."""
    differ = [
        f"events/{tag}"
        for tag in sorted(set(before["events"]) | set(after["events"]))
        if tag != "operative_config" and before["events"].get(tag) != after["events"].get(tag)
    ]
    differ += [key for key in ("checkpoints", "results") if before[key] != after[key]]
    config = before.get("operative_config") != after.get("operative_config") or before[
        "events"
    ].get("operative_config") != after["events"].get("operative_config")
    return differ, config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before_dir", help="fingerprints of the code before the change")
    parser.add_argument("after_dir", help="fingerprints of the code after it")
    args = parser.parse_args()
    before_dir, after_dir = args.before_dir, args.after_dir
    status = 0
    for name in sorted(os.listdir(before_dir)):
        if not name.endswith(".json"):
            continue
        if not os.path.exists(os.path.join(after_dir, name)):
            print(f"{name[:-5]}: not in {after_dir}")
            status = 1
            continue
        with open(os.path.join(before_dir, name)) as f:
            before = json.load(f)
        with open(os.path.join(after_dir, name)) as f:
            after = json.load(f)
        differ, config = compare(before, after)
        status |= bool(differ)
        verdict = "identical" if not differ else "DIFFERS in " + ", ".join(differ)
        note = "; operative config text differs" if config else ""
        print(f"{name[:-5]}: {len(before['checkpoints'])} checkpoints, {verdict}{note}")
    return status


if __name__ == "__main__":
    sys.exit(main())
