#!/usr/bin/env python3
"""What training and serving write under models/ stays out of git; the shipped files stay in.

Copies the repository's .gitignore into a fresh git repository (so that the check depends on
the file alone, not on the checkout it runs in) and asks `git check-ignore` about the paths
forecastd writes and the paths the repository ships. Exits 0 when every answer is the expected
one, 1 otherwise, 77 (skip) without git.
"""

import os
import shutil
import subprocess
import sys
import tempfile

# Written by forecastd into the model repository: a trained model, new versions of a demo,
# checkpoints (each model's, and the old shared folder), tick-stream snapshots, job records.
WRITTEN = [
    "models/my_model/config.json",
    "models/my_model/1/model.safetensors",
    "models/my_model/.checkpoints/0123456789abcdef.ckpt",
    "models/demo_lstm/2/model.safetensors",
    "models/demo_lstm/2.staging/model.safetensors",
    "models/demo_lstm/.checkpoints/0123456789abcdef.ckpt",
    "models/demo_transformer/7/model.safetensors",
    "models/.checkpoints/demo_lstm-0123456789abcdef.ckpt",
    "models/.streams/streams.pb",
    "models/.jobs/train-20261126-214612-1.json",
]


def main():
    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    git = shutil.which("git")
    if git is None:
        print("gitignore_check: git is not installed; skipped")
        return 77
    shipped = subprocess.run([git, "-C", source, "ls-files", "models"], capture_output=True,
                             text=True)
    tracked = shipped.stdout.split() if shipped.returncode == 0 else []
    if not tracked:
        # Not a checkout (a source tarball): the files the repository ships.
        tracked = ["models/README.md", "models/sample_input.csv", "models/demo_lstm/config.json",
                   "models/demo_lstm/1/model.safetensors", "models/demo_transformer/config.json",
                   "models/demo_transformer/1/model.safetensors"]
    failures = []
    with tempfile.TemporaryDirectory(prefix="forecastd-gitignore-") as repo:
        subprocess.run([git, "init", "-q", repo], check=True)
        shutil.copy(os.path.join(source, ".gitignore"), os.path.join(repo, ".gitignore"))

        def ignored(path):
            return subprocess.run([git, "-C", repo, "check-ignore", "-q", "--no-index", path]
                                  ).returncode == 0

        for path in WRITTEN:
            ok = ignored(path)
            print(("  ok   " if ok else "  FAIL ") + f"ignored: {path}")
            if not ok:
                failures.append(path)
        for path in tracked:
            ok = not ignored(path)
            print(("  ok   " if ok else "  FAIL ") + f"kept:    {path}")
            if not ok:
                failures.append(path)
    print("gitignore_check: " + ("all hold" if not failures else f"{len(failures)} wrong"))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
