#!/usr/bin/env python3
"""Checks of the deployment material against the real tools and against each other.

  deploy_checks.py dockerfile --source DIR --binary FORECASTD --health-binary HEALTH
  deploy_checks.py k8s        --source DIR --binary FORECASTD
  deploy_checks.py systemd    --source DIR --binary FORECASTD
  deploy_checks.py promtool   --source DIR

dockerfile: the Dockerfile's stages for both variants (cpu builds on debian:12 and runs on
  debian:12-slim, cuda on NVIDIA's cudnn-devel and cudnn-runtime Ubuntu 24.04 images of one CUDA
  13.0 tag; each build runs scripts/install-deps.sh and scripts/build.sh; the runtime runs as
  non-root, has a grpc.health.v1 HEALTHCHECK, exposes 8001 and 8002, keeps /models as a volume,
  listens on 0.0.0.0 with flags forecastd knows), what
  it copies exists and is not .dockerignore'd, and its helper script works here: stage-runtime.sh
  on the built binaries.
k8s: every YAML file parses; kustomizations name files that exist; both variants, rendered by
  `kubectl kustomize` where kubectl is installed, agree with themselves (flags from the ConfigMap,
  probe and container ports, Service ports, grace period >= preStop + drain + grace, non-root,
  read-only root, writable model volume, GPU requests in the overlay) and with forecastd --help;
  the two-pod training example (examples/training-two-pods) likewise: a StatefulSet of GPU pods
  behind its headless Service, token files from a Secret others may not read, the worker address
  its README submits with, and none of it in what deploy/k8s or the GPU overlay deploys.
systemd: the unit stops forecastd with SIGTERM and waits at least drain + grace, and
  `systemd-analyze verify` accepts it where systemd-analyze is installed.
promtool: `promtool check config` and `promtool check rules` accept deploy/prometheus, and
  `promtool test rules` runs the alert-rule unit tests in tests/deploy/forecastd-rules-test.yml.
Exits 0 when every check holds, 1 otherwise (printing each failure).
"""

import argparse
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
    return condition


def known_flags(binary):
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", help_text))


def flag_defaults(binary):
    """{--flag: default} as forecastd --help shows them ("--drain-timeout FLOAT=30")."""
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"(--[a-z][a-z0-9-]*) [A-Z]+=(\S+)", help_text))


def drain_and_grace(values, binary):
    """--drain-timeout and --shutdown-grace-seconds as passed, else forecastd's defaults."""
    defaults = flag_defaults(binary)
    return (float(values.get("--drain-timeout", defaults["--drain-timeout"])),
            float(values.get("--shutdown-grace-seconds", defaults["--shutdown-grace-seconds"])))


def flag_values(args):
    """{--flag: value} from ["--flag=value", "--flag", "value", ...]."""
    values, i = {}, 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
            values[name] = value
        elif arg.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            values[arg] = args[i + 1]
            i += 1
        elif arg.startswith("--"):
            values[arg] = ""
        i += 1
    return values


def port_of(address):
    return int(address.rsplit(":", 1)[1])


# --------------------------------------------------------------------------------------------
# Dockerfile


def parse_dockerfile(path):
    """[(instruction, argument text, stage index)] and the list of stages."""
    logical, current = [], ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if current and line.lstrip().startswith("#"):
                continue  # a comment inside a continued instruction
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            logical.append(current + line)
            current = ""
    instructions, stages = [], []
    for line in logical:
        keyword, _, rest = line.strip().partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.I)
            stages.append({"image": m.group(1), "name": m.group(2), "instructions": []})
        if stages:
            stages[-1]["instructions"].append((keyword, rest.strip()))
        else:
            instructions.append((keyword, rest.strip()))
    return instructions, stages


def expand(text, variables):
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), text)


def stage_chain(stages, name_or_image, global_args):
    """The stages a stage builds on, itself last, following FROM <stage>."""
    by_name = {s["name"]: s for s in stages if s["name"]}
    chain, ref = [], name_or_image
    while ref in by_name:
        stage = by_name[ref]
        chain.insert(0, stage)
        ref = expand(stage["image"], global_args)
    return chain, ref  # ref: the external base image


def dockerignore_patterns(path):
    patterns = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                patterns.append(line)
    return patterns


def ignored(relpath, patterns):
    parts = relpath.strip("/").split("/")
    for pattern in patterns:
        pattern = pattern.strip("/")
        pat = pattern[3:] if pattern.startswith("**/") else pattern
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatch(part, pat) for part in parts):
                return True
        for i in range(1, len(parts) + 1):  # a pattern matches the path or a parent folder
            if fnmatch.fnmatch("/".join(parts[:i]), pat):
                return True
    return False


def check_dockerfile(args):
    source = args.source
    flags = known_flags(args.binary)
    global_instructions, stages = parse_dockerfile(os.path.join(source, "Dockerfile"))
    global_args = {}
    for keyword, rest in global_instructions:
        if keyword == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            # As Docker does: a default may use the ARGs declared before it.
            global_args[name] = expand(value.strip('"'), global_args)
    check(global_args.get("VARIANT") == "cuda", "Dockerfile: ARG VARIANT should default to cuda")
    final = stages[-1]
    check(final["name"] == "runtime", "Dockerfile: the last stage should be named runtime")

    # Each variant builds and runs on one release, so that the runtime installs the packages the
    # build linked: Debian 12 for cpu; for cuda NVIDIA's images, devel and runtime of one tag.
    cuda_image = r"nvidia/cuda:(13\.0\.\d+)-cudnn-{}-ubuntu24\.04"
    for variant in ("cpu", "cuda"):
        variables = dict(global_args, VARIANT=variant)
        runtime_chain, runtime_base = stage_chain(stages, final["name"], variables)
        where = f"Dockerfile (VARIANT={variant})"
        copies_from = {m.group(1) for s in runtime_chain for k, r in s["instructions"]
                       if k == "COPY" for m in [re.search(r"--from=(\S+)", r)] if m}
        check(copies_from == {"build"}, f"{where}: the runtime copies from {copies_from}, not build")
        build_chain, build_base = stage_chain(stages, "build", variables)
        if variant == "cpu":
            check(runtime_base == "debian:12-slim",
                  f"{where}: the runtime should build on debian:12-slim, not {runtime_base}")
            check(build_base == "debian:12", f"{where}: the build stage bases on {build_base}")
        else:
            devel = re.fullmatch(cuda_image.format("devel"), build_base)
            runtime = re.fullmatch(cuda_image.format("runtime"), runtime_base)
            check(devel, f"{where}: the build should base on nvidia/cuda:13.0.x-cudnn-devel-"
                         f"ubuntu24.04, not {build_base}")
            check(runtime, f"{where}: the runtime should base on nvidia/cuda:13.0.x-cudnn-runtime-"
                           f"ubuntu24.04, not {runtime_base}")
            check(not (devel and runtime) or devel.group(1) == runtime.group(1),
                  f"{where}: the build ({build_base}) and the runtime ({runtime_base}) should "
                  f"share one CUDA version")
        runs = " ".join(r for s in build_chain for k, r in s["instructions"] if k == "RUN")
        envs = " ".join(r for s in build_chain for k, r in s["instructions"] if k == "ENV")
        check("scripts/install-deps.sh" in runs, f"{where}: the build does not run install-deps.sh")
        check("scripts/build.sh" in runs, f"{where}: the build does not run scripts/build.sh")
        want = "-DFORECASTD_CUDA=ON" if variant == "cuda" else "-DFORECASTD_CUDA=OFF"
        check(want in envs, f"{where}: the build's CMake flags lack {want}")

    runtime = {k: [] for k in ("USER", "HEALTHCHECK", "EXPOSE", "VOLUME", "CMD", "ENTRYPOINT")}
    for keyword, rest in final["instructions"]:
        if keyword in runtime:
            runtime[keyword].append(rest)
    user = (runtime["USER"] or ["root"])[-1].split(":")[0]
    check(user not in ("root", "0"), f"Dockerfile: the runtime runs as {user}, not a non-root user")
    check(user.isdigit(), "Dockerfile: USER should be numeric so runAsNonRoot can verify it")
    health = " ".join(runtime["HEALTHCHECK"])
    check("forecastd-health" in health and "8001" in health,
          f"Dockerfile: HEALTHCHECK should run forecastd-health against 8001: {health!r}")
    exposed = {p for e in runtime["EXPOSE"] for p in e.split()}
    check({"8001", "8002"} <= exposed, f"Dockerfile: EXPOSE {exposed}, want 8001 and 8002")
    check(any("/models" in v for v in runtime["VOLUME"]), "Dockerfile: no VOLUME /models")
    entry = " ".join(runtime["ENTRYPOINT"] + runtime["CMD"])
    cmd_args = re.findall(r'"([^"]*)"', " ".join(runtime["CMD"]))
    values = flag_values(cmd_args)
    check("forecastd" in entry, "Dockerfile: the entrypoint does not run forecastd")
    check(values.get("--grpc-address") == "0.0.0.0:8001",
          f"Dockerfile: --grpc-address is {values.get('--grpc-address')}, want 0.0.0.0:8001")
    check(values.get("--metrics-address") == "0.0.0.0:8002",
          f"Dockerfile: --metrics-address is {values.get('--metrics-address')}, want 0.0.0.0:8002")
    check(values.get("--model-repository") == "/models", "Dockerfile: --model-repository /models")
    for flag in values:
        check(flag in flags, f"Dockerfile: CMD passes {flag}, which forecastd --help does not list")

    # What COPY takes from the build context must exist and survive .dockerignore.
    patterns = dockerignore_patterns(os.path.join(source, ".dockerignore"))
    for must in (".git", "build", "build-*", ".gpu", ".cache"):
        check(must in patterns, f".dockerignore should exclude {must}")
    for stage in stages:
        for keyword, rest in stage["instructions"]:
            if keyword not in ("COPY", "ADD") or "--from=" in rest:
                continue
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            for src in parts[:-1]:
                if src == ".":
                    continue
                check(os.path.exists(os.path.join(source, src)),
                      f"Dockerfile: COPY {src}: no such file in the repository")
                check(not ignored(src, patterns), f"Dockerfile: COPY {src} is .dockerignore'd")
    for needed in ("scripts/install-deps.sh", "scripts/build.sh", "CMakeLists.txt", "models"):
        check(not ignored(needed, patterns), f".dockerignore excludes {needed}, which the build needs")
    check(ignored("build-deploy/server/forecastd", patterns), ".dockerignore keeps build-* trees")

    # The Makefile builds through the same script.
    with open(os.path.join(source, "Makefile"), encoding="utf-8") as f:
        makefile = f.read()
    build_target = re.search(r"^build:.*\n((?:\t.*\n?)+)", makefile, re.M)
    check(build_target and "scripts/build.sh" in build_target.group(1),
          "Makefile: the build target should run scripts/build.sh")

    with tempfile.TemporaryDirectory(prefix="forecastd_docker_") as work:
        # stage-runtime.sh on this build: the packages the runtime stage would install.
        out = os.path.join(work, "runtime")
        run = subprocess.run(["bash", os.path.join(source, "deploy/docker/stage-runtime.sh"), out,
                              args.binary, args.health_binary], capture_output=True, text=True)
        if check(run.returncode == 0, f"stage-runtime.sh failed:\n{run.stdout}{run.stderr}"):
            with open(os.path.join(out, "packages.txt"), encoding="utf-8") as f:
                packages = f.read().split()
            print(f"stage-runtime.sh: the runtime stage would install {' '.join(packages)}")
            for wanted in ("libgrpc++", "libprotobuf", "libdnnl", "libspdlog", "libprometheus-cpp"):
                check(any(p.startswith(wanted) for p in packages),
                      f"stage-runtime.sh: no {wanted}* package among {packages}")
            for pkg in packages:
                status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg],
                                        capture_output=True, text=True).stdout
                check("install ok installed" in status, f"stage-runtime.sh: {pkg} is no package")
            # The libraries no Debian package owns: none for a CPU build; for a CUDA build
            # (the default wherever nvcc is installed) only NVIDIA's.
            unowned = os.listdir(os.path.join(out, "lib"))
            nvidia = re.compile(r"^lib(cuda|cudart|cublas|cublasLt|cudnn\w*|nccl|nvrtc[\w-]*|"
                                r"nvidia-ml|nvJitLink)\.so")
            cuda_build = any(nvidia.match(lib) for lib in unowned)
            others = [lib for lib in unowned if not nvidia.match(lib)]
            check(not others, f"stage-runtime.sh: only NVIDIA's libraries may be unpackaged, got "
                              f"{others}")
            print(f"stage-runtime.sh: a {'CUDA' if cuda_build else 'CPU'} build; unpackaged: "
                  f"{' '.join(sorted(unowned)) or 'none'}")
        check_stage_runtime_cuda(source, work)

    shellcheck = shutil.which("shellcheck")
    scripts = [os.path.join(source, p) for p in ("scripts/build.sh", "deploy/docker/stage-runtime.sh")]
    if shellcheck:
        run = subprocess.run([shellcheck, "-S", "warning"] + scripts, capture_output=True, text=True)
        check(run.returncode == 0, f"shellcheck:\n{run.stdout}{run.stderr}")
    else:
        print("shellcheck not installed: the shell scripts were not linted")


def check_stage_runtime_cuda(source, work):
    """stage-runtime.sh on a program linked as the CUDA build links forecastd (cudart, cuBLAS,
    cuDNN, NCCL from the toolkit directory): those libraries, and what cuDNN dlopens, are copied."""
    cuda_lib = "/usr/local/cuda/lib64"
    libs = ["cudart", "cublas", "cublasLt", "cudnn", "nccl"]
    if not all(os.path.exists(f"{cuda_lib}/lib{lib}.so") for lib in libs) or not shutil.which("g++"):
        print(f"no CUDA toolkit with cuDNN and NCCL in {cuda_lib}: stage-runtime.sh was not tried "
              "on CUDA libraries")
        return
    program = os.path.join(work, "cuda_linked")
    with open(program + ".cc", "w") as f:
        f.write("int main() { return 0; }\n")
    subprocess.run(["g++", program + ".cc", "-o", program, f"-L{cuda_lib}", "-Wl,--no-as-needed"]
                   + [f"-l{lib}" for lib in libs] + [f"-Wl,-rpath,{cuda_lib}"], check=True)
    out = os.path.join(work, "runtime-cuda")
    run = subprocess.run(["bash", os.path.join(source, "deploy/docker/stage-runtime.sh"), out,
                          program], capture_output=True, text=True,
                         env=dict(os.environ, STAGE_RUNTIME_LINK_ONLY="1"))
    if not check(run.returncode == 0, f"stage-runtime.sh (CUDA) failed:\n{run.stdout}{run.stderr}"):
        return
    copied = set(os.listdir(os.path.join(out, "lib")))
    for lib in ("libcudart.so.", "libcublas.so.", "libcublasLt.so.", "libcudnn.so.", "libnccl.so.",
                "libcudnn_graph.so.", "libcudnn_ops.so.", "libcudnn_engines_precompiled.so."):
        check(any(name.startswith(lib) for name in copied),
              f"stage-runtime.sh: no {lib}* among the CUDA libraries it copied: {sorted(copied)}")
    print(f"stage-runtime.sh on a CUDA-linked program copies {len(copied)} libraries: "
          f"{' '.join(sorted(copied))}")


# --------------------------------------------------------------------------------------------
# Kubernetes


def load_yaml_docs(path):
    import yaml  # Debian's python3-yaml
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def check_kustomization(directory):
    """Every file a kustomization.yaml names exists; recurses into directories it names."""
    docs = load_yaml_docs(os.path.join(directory, "kustomization.yaml"))
    kustomization = docs[0]
    names = list(kustomization.get("resources", []))
    names += [p["path"] for p in kustomization.get("patches", []) if "path" in p]
    names += kustomization.get("patchesStrategicMerge", [])
    for name in names:
        path = os.path.normpath(os.path.join(directory, name))
        if not check(os.path.exists(path), f"{directory}/kustomization.yaml: {name} does not exist"):
            continue
        if os.path.isdir(path):
            check(os.path.exists(os.path.join(path, "kustomization.yaml")),
                  f"{path}: named as a resource but has no kustomization.yaml")
            check_kustomization(path)


def render(k8s, overlay, kubectl):
    import yaml
    path = os.path.join(k8s, overlay)
    run = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True)
    if not check(run.returncode == 0, f"kubectl kustomize {overlay} failed: {run.stderr}"):
        return []
    return [d for d in yaml.safe_load_all(run.stdout) if d]


def check_variant(name, docs, flags, variant, binary):
    kinds = {}
    for doc in docs:
        kinds.setdefault(doc["kind"], []).append(doc)
    for kind in ("ConfigMap", "Deployment", "Service", "PodDisruptionBudget",
                 "HorizontalPodAutoscaler"):
        check(kind in kinds, f"{name}: no {kind}")
    if "Deployment" not in kinds or "ConfigMap" not in kinds:
        return
    deployment = kinds["Deployment"][0]
    configmaps = {c["metadata"]["name"]: c.get("data", {}) for c in kinds["ConfigMap"]}
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    container = next(c for c in spec["containers"] if c["name"] == "forecastd")
    env = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef", {}).get("name")
        if check(ref in configmaps, f"{name}: envFrom names ConfigMap {ref}, which is not there"):
            env.update(configmaps[ref])
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", "")

    def resolve(arg):
        def sub(m):
            check(m.group(1) in env, f"{name}: {arg} uses $({m.group(1)}), defined nowhere")
            return str(env.get(m.group(1), ""))
        return re.sub(r"\$\((\w+)\)", sub, arg)

    args = [resolve(a) for a in container.get("command", [])[1:] + container.get("args", [])]
    values = flag_values(args)
    for flag in values:
        check(flag in flags, f"{name}: the container passes {flag}, unknown to forecastd --help")
    grpc_port = port_of(values.get("--grpc-address", "127.0.0.1:8001"))
    metrics_port = port_of(values.get("--metrics-address", "127.0.0.1:8002"))
    check(values.get("--grpc-address", "").startswith("0.0.0.0:"),
          f"{name}: --grpc-address must listen on 0.0.0.0 in a pod, not {values.get('--grpc-address')}")
    check(values.get("--metrics-address", "").startswith("0.0.0.0:"),
          f"{name}: --metrics-address must listen on 0.0.0.0 in a pod")
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    check(ports.get("grpc") == grpc_port, f"{name}: container port grpc {ports.get('grpc')} "
                                          f"!= --grpc-address port {grpc_port}")
    check(ports.get("metrics") == metrics_port, f"{name}: container port metrics "
                                                f"{ports.get('metrics')} != {metrics_port}")
    for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = container.get(probe_name)
        if not check(probe and "grpc" in probe, f"{name}: {probe_name} is not a gRPC probe"):
            continue
        check(probe["grpc"].get("port") == grpc_port,
              f"{name}: {probe_name} probes port {probe['grpc'].get('port')}, forecastd's gRPC "
              f"port is {grpc_port}")
        if probe_name == "readinessProbe":
            check(probe["grpc"].get("service", "") == "",
                  f"{name}: readiness should ask for the whole server (service \"\")")
    annotations = pod["metadata"].get("annotations", {})
    check(annotations.get("prometheus.io/scrape") == "true", f"{name}: no prometheus.io/scrape")
    check(annotations.get("prometheus.io/port") == str(metrics_port),
          f"{name}: prometheus.io/port {annotations.get('prometheus.io/port')} != {metrics_port}")
    check(annotations.get("prometheus.io/path") == "/metrics", f"{name}: prometheus.io/path")

    drain, grace = drain_and_grace(values, binary)
    pre_stop = 0.0
    hook = container.get("lifecycle", {}).get("preStop", {})
    if "exec" in hook and hook["exec"]["command"][0] == "sleep":
        pre_stop = float(hook["exec"]["command"][1])
    elif "sleep" in hook:
        pre_stop = float(hook["sleep"]["seconds"])
    check(pre_stop > 0, f"{name}: preStop should wait for endpoint removal before SIGTERM")
    period = spec.get("terminationGracePeriodSeconds", 30)
    check(period >= pre_stop + drain + grace,
          f"{name}: terminationGracePeriodSeconds {period} < preStop {pre_stop} + drain {drain} "
          f"+ grace {grace}")
    print(f"{name}: grace period {period}s >= preStop {pre_stop:g}s + --drain-timeout {drain:g}s + "
          f"--shutdown-grace-seconds {grace:g}s")

    pod_security = spec.get("securityContext", {})
    security = container.get("securityContext", {})
    check(pod_security.get("runAsNonRoot") or security.get("runAsNonRoot"), f"{name}: runAsNonRoot")
    check(pod_security.get("runAsUser", security.get("runAsUser")) == 10001,
          f"{name}: runAsUser should be the image's user 10001")
    check(security.get("readOnlyRootFilesystem") is True, f"{name}: readOnlyRootFilesystem")
    check(security.get("allowPrivilegeEscalation") is False, f"{name}: allowPrivilegeEscalation")
    repository = values.get("--model-repository", "models")
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    check(repository in mounts and not mounts[repository].get("readOnly"),
          f"{name}: the model repository {repository} should be a writable volume mount")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in mounts.values():
        check(mount["name"] in volumes, f"{name}: volume {mount['name']} is mounted but not defined")
    resources = container.get("resources", {})
    check(resources.get("requests") and resources.get("limits"), f"{name}: resources")
    gpus = resources.get("limits", {}).get("nvidia.com/gpu")
    if variant == "gpu":
        check(gpus and int(gpus) >= 1, f"{name}: the GPU overlay should request nvidia.com/gpu")
        check("all" in values.get("--devices", "") or "cuda" in values.get("--devices", ""),
              f"{name}: the GPU overlay should run with --devices all")
        check(container["image"].endswith(":cuda"), f"{name}: the GPU overlay runs {container['image']}")
    else:
        check(not gpus, f"{name}: the CPU base should not request GPUs")
        check(container["image"].endswith(":cpu"), f"{name}: the base runs {container['image']}")

    labels = pod["metadata"].get("labels", {})

    def selects(selector):
        return selector and all(labels.get(k) == v for k, v in selector.items())

    check(selects(deployment["spec"]["selector"]["matchLabels"]), f"{name}: Deployment selector")
    services = kinds.get("Service", [])
    check(any(s["spec"].get("clusterIP") == "None" for s in services), f"{name}: no headless Service")
    for service in services:
        check(selects(service["spec"].get("selector")),
              f"{name}: Service {service['metadata']['name']} selects no forecastd pod")
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            check(target in ports or target in ports.values(),
                  f"{name}: Service {service['metadata']['name']} targets port {target}, "
                  f"which the container does not declare")
        by_name = {p["name"]: p for p in service["spec"]["ports"]}
        check("grpc" in by_name and "metrics" in by_name,
              f"{name}: Service {service['metadata']['name']} ports should be named grpc and metrics")
    for pdb in kinds.get("PodDisruptionBudget", []):
        check(selects(pdb["spec"]["selector"]["matchLabels"]), f"{name}: PDB selects no pod")
    for hpa in kinds.get("HorizontalPodAutoscaler", []):
        check(hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"],
              f"{name}: the HPA scales {hpa['spec']['scaleTargetRef']['name']}")
        metrics = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
        check(metrics == ["forecastd_queue_depth"], f"{name}: the HPA should scale on "
                                                    f"forecastd_queue_depth, not {metrics}")
        check(hpa["spec"]["minReplicas"] >= 2, f"{name}: HPA minReplicas < 2 leaves no spare")


def check_k8s(args):
    source = args.source
    k8s = os.path.join(source, "deploy/k8s")
    flags = known_flags(args.binary)
    for directory, _, files in os.walk(k8s):
        for name in files:
            if name.endswith((".yaml", ".yml")):
                try:
                    load_yaml_docs(os.path.join(directory, name))
                except Exception as e:  # noqa: BLE001 -- any parse error is the finding
                    check(False, f"{os.path.join(directory, name)}: does not parse: {e}")
    check_kustomization(k8s)
    check_kustomization(os.path.join(k8s, "overlays/gpu"))
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("kubectl not installed: `kubectl kustomize` rendering was not checked; checking "
              "the base files as they are")
        docs = []
        for name in sorted(os.listdir(os.path.join(k8s, "base"))):
            if name != "kustomization.yaml":
                docs += load_yaml_docs(os.path.join(k8s, "base", name))
        for doc in docs:  # the base's images: transformer, by hand
            for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                c["image"] = "forecastd:cpu"
        check_variant("deploy/k8s/base", docs, flags, "cpu", args.binary)
    else:
        check_variant("deploy/k8s", render(k8s, ".", kubectl), flags, "cpu", args.binary)
        check_variant("deploy/k8s/overlays/gpu", render(k8s, "overlays/gpu", kubectl), flags, "gpu",
                      args.binary)

    check_training_example(k8s, flags, kubectl, args.binary)

    # The Kubernetes scrape job finds the pods by what the Deployment sets.
    scrape = load_yaml_docs(os.path.join(source, "deploy/prometheus/prometheus-kubernetes.yml"))[0]
    relabel = scrape["scrape_configs"][0]["relabel_configs"]
    keeps = {tuple(r["source_labels"]): r["regex"] for r in relabel if r.get("action") == "keep"}
    check(keeps.get(("__meta_kubernetes_pod_container_port_name",)) == "metrics",
          "prometheus-kubernetes.yml should keep the container port named metrics")
    check(keeps.get(("__meta_kubernetes_pod_annotation_prometheus_io_scrape",)) == "true",
          "prometheus-kubernetes.yml should keep pods annotated prometheus.io/scrape=true")


def check_training_example(k8s, flags, kubectl, binary):
    """deploy/k8s/examples/training-two-pods: two GPU pods that train one job together."""
    example = "examples/training-two-pods"
    directory = os.path.join(k8s, example)
    name = f"deploy/k8s/{example}"
    check_kustomization(directory)
    if kubectl:
        docs = render(k8s, example, kubectl)
        for overlay in (".", "overlays/gpu"):
            check(not any(d["kind"] == "StatefulSet" for d in render(k8s, overlay, kubectl)),
                  f"deploy/k8s/{overlay}: deploys the training example's StatefulSet")
    else:
        docs = []
        for file in sorted(os.listdir(directory)):
            if file.endswith(".yaml") and file != "kustomization.yaml":
                docs += load_yaml_docs(os.path.join(directory, file))
        for doc in docs:
            for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                c["image"] = "forecastd:cuda"
    sets = [d for d in docs if d["kind"] == "StatefulSet"]
    if not check(len(sets) == 1, f"{name}: expected one StatefulSet, found {len(sets)}"):
        return
    statefulset = sets[0]
    pod = statefulset["spec"]["template"]
    spec = pod["spec"]
    labels = pod["metadata"].get("labels", {})
    check(statefulset["spec"].get("replicas", 1) >= 2, f"{name}: a job of two pods needs 2 replicas")
    check(all(labels.get(k) == v
              for k, v in statefulset["spec"]["selector"]["matchLabels"].items()),
          f"{name}: StatefulSet selector")
    service = next((d for d in docs if d["kind"] == "Service"
                    and d["metadata"]["name"] == statefulset["spec"].get("serviceName")), None)
    if check(service is not None, f"{name}: no Service named by serviceName "
                                  f"{statefulset['spec'].get('serviceName')}"):
        check(service["spec"].get("clusterIP") == "None",
              f"{name}: the StatefulSet's Service must be headless (per-pod DNS names)")
        check(all(labels.get(k) == v for k, v in service["spec"].get("selector", {}).items()),
              f"{name}: Service {service['metadata']['name']} selects no training pod")
    container = next(c for c in spec["containers"] if c["name"] == "forecastd")
    values = flag_values(container.get("command", [])[1:] + container.get("args", []))
    for flag in values:
        check(flag in flags, f"{name}: the container passes {flag}, unknown to forecastd --help")
    grpc_address = values.get("--grpc-address", "127.0.0.1:8001")
    check(grpc_address.startswith("0.0.0.0:"), f"{name}: --grpc-address must listen on 0.0.0.0")
    grpc_port = port_of(grpc_address)
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    check(ports.get("grpc") == grpc_port, f"{name}: container port grpc {ports.get('grpc')} "
                                          f"!= --grpc-address port {grpc_port}")
    for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = container.get(probe_name, {})
        check(probe.get("grpc", {}).get("port") == grpc_port,
              f"{name}: {probe_name} should probe gRPC port {grpc_port}")
    gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    check(gpus and int(gpus) >= 1, f"{name}: each pod should request an nvidia.com/gpu")
    check(container["image"].endswith(":cuda"), f"{name}: runs {container['image']}, not :cuda")
    security = container.get("securityContext", {})
    check(security.get("readOnlyRootFilesystem") is True, f"{name}: readOnlyRootFilesystem")
    check(security.get("allowPrivilegeEscalation") is False, f"{name}: allowPrivilegeEscalation")
    drain, grace = drain_and_grace(values, binary)
    check(spec.get("terminationGracePeriodSeconds", 30) >= 5 + drain + grace,
          f"{name}: terminationGracePeriodSeconds below preStop + drain + grace")
    # The token files come from a Secret mounted with no access for others (forecastd refuses
    # a token file others may read).
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = container.get("volumeMounts", [])
    for flag in ("--token-file", "--train-worker-token-file"):
        path = values.get(flag, "")
        if not check(path, f"{name}: the pods should run with {flag}"):
            continue
        mount = next((m for m in mounts if path.startswith(m["mountPath"].rstrip("/") + "/")), None)
        secret = volumes.get(mount["name"], {}).get("secret") if mount else None
        if check(secret is not None, f"{name}: {flag} {path} is not in a mounted Secret"):
            check(secret.get("defaultMode", 0o644) & 0o007 == 0,
                  f"{name}: the Secret of {flag} is mounted readable by others "
                  f"(defaultMode {secret.get('defaultMode', 0o644):o})")
    # The README submits to pod 0 with pod 1 as the worker, by its stable DNS name.
    with open(os.path.join(directory, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    worker = (f"{statefulset['metadata']['name']}-1.{statefulset['spec'].get('serviceName')}"
              f":{grpc_port}")
    check(f"--worker {worker}" in readme, f"{name}/README.md: no `--worker {worker}`")
    check(f"pod/{statefulset['metadata']['name']}-0" in readme,
          f"{name}/README.md: should submit to pod {statefulset['metadata']['name']}-0")
    print(f"{name}: {statefulset['spec'].get('replicas')} GPU pods, worker address {worker}")


# --------------------------------------------------------------------------------------------
# systemd


def check_systemd(args):
    unit_path = os.path.join(args.source, "deploy/systemd/forecastd.service")
    with open(unit_path, encoding="utf-8") as f:
        text = re.sub(r"\\\n", " ", f.read())
    settings = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    exec_start = shlex.split(settings["ExecStart"][0])
    values = flag_values(exec_start[1:])
    flags = known_flags(args.binary)
    for flag in values:
        check(flag in flags, f"forecastd.service: ExecStart passes {flag}, unknown to forecastd")
    check(settings.get("KillSignal") == ["SIGTERM"], "forecastd.service: KillSignal=SIGTERM")
    drain, grace = drain_and_grace(values, args.binary)
    stop = settings.get("TimeoutStopSec", ["90"])[0]
    stop_seconds = float(re.sub(r"s$", "", stop))
    check(stop_seconds >= drain + grace,
          f"forecastd.service: TimeoutStopSec {stop} < --drain-timeout {drain} + grace {grace}")
    print(f"forecastd.service: TimeoutStopSec {stop_seconds:g}s >= --drain-timeout {drain:g}s + "
          f"--shutdown-grace-seconds {grace:g}s")
    check(settings.get("User", ["root"])[0] not in ("root", "0"), "forecastd.service: User root")
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        print("systemd-analyze not installed: the unit was not verified by systemd")
        return
    with tempfile.TemporaryDirectory(prefix="forecastd_unit_") as work:
        with open(unit_path, encoding="utf-8") as f:  # ExecStart must name an executable here
            unit = f.read().replace(exec_start[0], os.path.abspath(args.binary))
        path = os.path.join(work, "forecastd.service")
        with open(path, "w", encoding="utf-8") as f:
            f.write(unit)
        run = subprocess.run([analyze, "verify", "--man=no", path], capture_output=True, text=True)
        output = "\n".join(line for line in (run.stdout + run.stderr).splitlines()
                           if "forecastd.service" in line or "Failed" in line)
        check(run.returncode == 0 and not output.strip(),
              f"systemd-analyze verify forecastd.service:\n{run.stdout}{run.stderr}")


# --------------------------------------------------------------------------------------------
# promtool


def check_promtool(args):
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    prometheus_dir = os.path.join(args.source, "deploy/prometheus")
    tests = os.path.abspath(os.path.join(args.source, "tests/deploy/forecastd-rules-test.yml"))
    for command in (["check", "config", "prometheus.yml"],
                    ["check", "rules", "forecastd-rules.yml"],
                    ["test", "rules", tests]):
        run = subprocess.run([promtool] + command, cwd=prometheus_dir, capture_output=True,
                             text=True)
        print(f"$ promtool {' '.join(command)}\n{run.stdout}{run.stderr}".rstrip())
        check(run.returncode == 0, f"promtool {' '.join(command)} failed")
    run = subprocess.run([promtool, "check", "config", "prometheus-kubernetes.yml"],
                         cwd=prometheus_dir, capture_output=True, text=True)
    if "kubernetes_sd_configs not found" in run.stderr + run.stdout:
        print("promtool here has no Kubernetes service discovery (Debian's build): "
              "prometheus-kubernetes.yml was only parsed as YAML")
        load_yaml_docs(os.path.join(prometheus_dir, "prometheus-kubernetes.yml"))
    else:
        print(f"$ promtool check config prometheus-kubernetes.yml\n{run.stdout}{run.stderr}")
        check(run.returncode == 0, "promtool check config prometheus-kubernetes.yml failed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["dockerfile", "k8s", "systemd", "promtool"])
    ap.add_argument("--source", required=True)
    ap.add_argument("--binary")
    ap.add_argument("--health-binary")
    args = ap.parse_args()
    {"dockerfile": check_dockerfile, "k8s": check_k8s, "systemd": check_systemd,
     "promtool": check_promtool}[args.what](args)
    for failure in FAILURES:
        print("FAILED:", failure, file=sys.stderr)
    print(f"deploy {args.what}: {'FAILED' if FAILURES else 'ok'}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
