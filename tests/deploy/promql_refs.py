"""What PromQL expressions refer to, and which metrics and labels forecastd exports.

Used by the deploy checks to hold the Grafana dashboard and the alert rules to the metrics that
forecastd really exports (a live /metrics scrape) and those server/serving_metrics.h documents
(the per-GPU series among them, which a CPU-only daemon does not export).
"""

import re

# Series Prometheus itself makes for every target.
PROMETHEUS_METRICS = {"up": set(), "scrape_duration_seconds": set()}

# Labels Prometheus attaches to every scraped series (job, instance), and those that the
# Kubernetes scrape job of deploy/prometheus/prometheus-kubernetes.yml adds.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "node"}

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and",
    "or", "unless", "inf", "nan", "atan2",
}
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def parse_exposition(text):
    """Parses Prometheus text exposition: {family: set of label names}, {family: type}."""
    families, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind.strip()
            families.setdefault(name, set())
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(\{(.*?)\})?\s", line)
        if not m:
            continue
        name, labels = m.group(1), set(re.findall(r"(\w+)=\"", m.group(3) or ""))
        labels.discard("le")
        labels.discard("quantile")
        family = name
        for suffix in _HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and types.get(name[: -len(suffix)]) in ("histogram", "summary"):
                family = name[: -len(suffix)]
        families.setdefault(family, set()).update(labels)
    return families, types


def documented_metrics(serving_metrics_h):
    """The forecastd_* series and labels that server/serving_metrics.h's header comment lists."""
    documented = {}
    with open(serving_metrics_h, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("//"):
                if line.startswith("#"):
                    break
                continue
            for name, labels in re.findall(r"(forecastd_\w+)(?:\{([\w,]*)\})?", line):
                documented.setdefault(name, set()).update(x for x in labels.split(",") if x)
    return documented


def _strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def references(expr):
    """(metric names, label names) an expression refers to."""
    expr = _strip_strings(expr)
    labels = set()
    for body in re.findall(r"\{([^}]*)\}", expr):
        labels.update(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", body))
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    for _, names in re.findall(
            r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        labels.update(n.strip() for n in names.split(",") if n.strip())
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    metrics = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)", expr):
        name = m.group(1)
        rest = expr[m.end():].lstrip()
        if rest.startswith("(") or name.lower() in _KEYWORDS:
            continue  # a function or an operator keyword
        metrics.add(name)
    return metrics, labels


class MetricCatalogue:
    """The series an expression may use: live, documented and Prometheus' own."""

    def __init__(self, live, documented):
        self.families = {}
        self.sources = {}
        for source, table in (("live", live), ("documented", documented),
                              ("prometheus", PROMETHEUS_METRICS)):
            for name, labels in table.items():
                self.families.setdefault(name, set()).update(labels)
                self.sources.setdefault(name, source)
        for labels in self.families.values():
            if "job" in labels:  # Prometheus renames an exposed job label to exported_job
                labels.add("exported_job")

    def family(self, name):
        if name in self.families:
            return name
        for suffix in _HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in self.families:
                return name[: -len(suffix)]
        return None

    def check(self, where, expr, extra_labels=()):
        """Problems with `expr` (a list of strings; empty when it refers only to known series)."""
        problems = []
        metrics, labels = references(expr)
        if not metrics:
            problems.append(f"{where}: refers to no metric: {expr!r}")
        allowed = set(TARGET_LABELS)
        for name in metrics:
            family = self.family(name)
            if family is None:
                problems.append(f"{where}: {name} is not a metric forecastd exports: {expr!r}")
                continue
            allowed |= self.families[family]
            if name.endswith("_bucket"):
                allowed.add("le")
        for label in sorted(set(labels) | set(extra_labels)):
            if label not in allowed:
                problems.append(f"{where}: label {label!r} is on none of {sorted(metrics)}: {expr!r}")
        return problems

    def source_of(self, expr):
        metrics, _ = references(expr)
        return {m: self.sources.get(self.family(m) or "", "unknown") for m in metrics}


def grafana_expressions(dashboard):
    """(where, expr) for every query in a Grafana dashboard, panels and template variables."""
    out = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append((f"panel {panel.get('title')!r} {target.get('refId')}",
                                target["expr"]))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query or "")
        if m:
            out.append((f"variable ${var['name']} (label {m.group(2)})", m.group(1), m.group(2)))
        else:
            out.append((f"variable ${var['name']}", query))
    return out


def substitute_grafana_variables(expr):
    """A Grafana query as Prometheus would receive it with every variable at 'All'."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "15s")
    expr = expr.replace("$__range", "1h")
    return re.sub(r"\$\{?\w+\}?", ".*", expr)
