#!/usr/bin/env python3
"""Checks forecastd's lock annotations with clang's -Wthread-safety.

The build is g++, which ignores ABSL_GUARDED_BY and friends; this script re-reads every C++
source of our own that the build compiles (from the build directory's compile_commands.json)
with `clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety`, in parallel, and fails
listing the diagnostics. Generated protobuf code (*.pb.cc) and CUDA (.cu) files are skipped.
It runs as the ctest test `thread_safety_check` (label lint) after the build, when the
generated proto headers exist; without clang++ it exits 77, which ctest reports as skipped.

usage: thread_safety_check.py --build-dir DIR [--source-dir DIR] [--clang PATH] [--jobs N]
                               [SOURCE...]  (only these, paths relative to the source dir)
       thread_safety_check.py --self-test FIXTURE --build-dir DIR ...
The second form is the check's self-test: it compiles FIXTURE (unannotated guarded accesses,
each marked with the error clang must give) with the flags the check gives engine/clock.cc,
plus `-Xclang -verify`, and succeeds only if clang reports exactly those errors; so the check
cannot pass because its flags silently turned the analysis off.
"""

import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

SKIP = 77  # ctest's SKIP_RETURN_CODE for this test
CHECK_FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
               # The command's g++-only -W options are not clang's business.
               "-Wno-unknown-warning-option"]
# g++-only options clang++ rejects (compared up to any "="); unknown -W options are only
# warned about. A new g++-only option fails the check with clang's "unknown argument" error
# (never a silent pass): add it here. Output and dependency-file options are dropped too.
DROP = {"-fconcepts-diagnostics-depth", "-fno-keep-inline-dllexport", "-fipa-pta",
        "-fno-gnu-unique", "-fmax-errors"}
DROP_WITH_ARG = {"-o", "-MF", "-MT", "-MQ"}


def clang_args(entry, clang):
    """The compile command of one compile_commands.json entry, rewritten for the check."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = [clang]
    i = 1
    while i < len(args):
        arg = args[i]
        if arg in DROP_WITH_ARG:
            i += 2
            continue
        if arg == "-c" or arg in ("-MD", "-MMD") or arg.split("=", 1)[0] in DROP:
            i += 1
            continue
        out.append(arg)
        i += 1
    return out + CHECK_FLAGS


def own_sources(entries, source_dir, build_dir):
    """Entries for .cc files under the source tree, generated code and CUDA left out."""
    source_dir = os.path.realpath(source_dir)
    build_dir = os.path.realpath(build_dir)
    keep = []
    for entry in entries:
        path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
        if not path.endswith(".cc") or path.endswith(".pb.cc"):
            continue
        if (os.path.commonpath([path, source_dir]) != source_dir or
            os.path.commonpath([path, build_dir]) == build_dir):
            continue
        keep.append((os.path.relpath(path, source_dir), entry))
    # Each source once, even where two targets compile it.
    return sorted(dict(keep).items())


def run_one(entry, clang, fixture=None):
    args = clang_args(entry, clang)
    if fixture:
        source = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
        args = [a for a in args if os.path.realpath(os.path.join(entry["directory"], a)) != source]
        args += ["-Xclang", "-verify", fixture]
    start = time.monotonic()
    proc = subprocess.run(args, cwd=entry["directory"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir",
                        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--clang", default=os.environ.get("CLANGXX", "clang++"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--self-test", metavar="FIXTURE")
    parser.add_argument("only", nargs="*", metavar="SOURCE")
    opts = parser.parse_args()

    clang = shutil.which(opts.clang)
    if not clang:
        print(f"thread_safety_check: SKIPPED: {opts.clang} not found "
              "(scripts/install-deps.sh installs clang)")
        return SKIP
    db_path = os.path.join(opts.build_dir, "compile_commands.json")
    with open(db_path) as db:
        sources = own_sources(json.load(db), opts.source_dir, opts.build_dir)
    if opts.only:
        sources = [(rel, entry) for rel, entry in sources if rel in opts.only]
    if not sources:
        print(f"thread_safety_check: no project sources to check in {db_path}")
        return 1

    if opts.self_test:
        fixture = os.path.abspath(opts.self_test)
        entry = dict(sources).get("engine/clock.cc", sources[0][1])
        rc, output, _ = run_one(entry, clang, fixture)
        if rc == 0:
            print(f"thread_safety_check self-test: clang reports each unannotated access in "
                  f"{fixture}")
            return 0
        print(f"thread_safety_check self-test: FAILED: clang's diagnostics for {fixture} are "
              "not the expected ones (the check's flags may have turned the analysis off):\n"
              f"{output}")
        return 1

    start = time.monotonic()
    reported = []
    seconds_per_source = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        futures = {pool.submit(run_one, entry, clang): rel for rel, entry in sources}
        for future in concurrent.futures.as_completed(futures):
            rc, output, source_seconds = future.result()
            seconds_per_source.append((source_seconds, futures[future]))
            # Other clang warnings are printed but only errors (the analysis's among them) fail.
            if rc != 0 or output.strip():
                reported.append((futures[future], rc, output))
    seconds = time.monotonic() - start
    for rel, rc, output in sorted(reported):
        print(f"--- {rel} (clang rc {rc})\n{output}")
    warnings = sum(output.count("[-Wthread-safety") + output.count("[-Werror,-Wthread-safety")
                   for _, _, output in reported)
    errors = [rel for rel, rc, _ in reported if rc != 0]
    print(f"thread_safety_check: {len(sources)} sources, {len(errors)} failed, "
          f"{warnings} thread-safety diagnostics, {seconds:.1f} s with {opts.jobs} jobs ({clang})")
    slowest = ", ".join(f"{rel} {t:.1f} s" for t, rel in sorted(seconds_per_source)[-3:])
    print(f"thread_safety_check: slowest: {slowest}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
