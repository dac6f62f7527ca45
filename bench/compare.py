"""Turn pytest-benchmark JSON into the side-by-side table and check the ratio floors.

Usage::

    python bench/compare.py results.json [--floors bench/floors.toml] [--markdown out.md]

Each benchmark group is one scenario: the ``fastdata`` test against each ``baseline:<name>``
test of the same group, measured in the same run. The ratio is fastdata's items/s over the
baseline's, from the median times (for a test that timed both sides alternately, the two
medians it recorded as ``median_s`` and ``paired``). A floor in ``floors.toml``
(``"group/baseline" = 1.5``) fails the run when the measured ratio is below it. Exit status 1
on a missed floor or a floor whose scenario did not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class Row:
    group: str
    baseline: str
    fastdata_items_s: float
    baseline_items_s: float
    unit: str

    @property
    def key(self) -> str:
        return f"{self.group}/{self.baseline}"

    @property
    def ratio(self) -> float:
        return self.fastdata_items_s / self.baseline_items_s


def load_rows(results: dict) -> list[Row]:
    """Pair every baseline with the fastdata result of its group."""
    by_group: dict[str, dict[str, tuple[float, str]]] = {}
    for bench in results["benchmarks"]:
        info = bench.get("extra_info", {})
        if "role" not in info:
            continue
        unit = info.get("unit", "items")
        roles = by_group.setdefault(bench["group"] or bench["name"], {})
        roles[info["role"]] = (info["items"] / info.get("median_s", bench["stats"]["median"]), unit)
        for role, median in info.get("paired", {}).items():  # timed alternately, one test
            roles[role] = (info["items"] / median, unit)
    rows = []
    for group, roles in sorted(by_group.items()):
        if "fastdata" not in roles:
            continue
        fast, unit = roles["fastdata"]
        for role, (rate, _) in sorted(roles.items()):
            if role.startswith("baseline:"):
                rows.append(Row(group, role.split(":", 1)[1], fast, rate, unit))
    return rows


def markdown(rows: list[Row], floors: dict[str, float]) -> str:
    """The comparison as a Markdown table."""
    lines = [
        "| scenario | baseline | fastdata | baseline rate | ratio | floor |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        floor = floors.get(r.key)
        lines.append(
            f"| {r.group} | {r.baseline} | {r.fastdata_items_s:,.0f} {r.unit}/s "
            f"| {r.baseline_items_s:,.0f} {r.unit}/s | {r.ratio:.2f}x "
            f"| {'' if floor is None else f'>= {floor:g}x'} |"
        )
    return "\n".join(lines)


def check_floors(rows: list[Row], floors: dict[str, float]) -> list[str]:
    """Messages for every floor that was missed or whose scenario is absent."""
    measured = {r.key: r.ratio for r in rows}
    problems = []
    for key, floor in floors.items():
        if key not in measured:
            problems.append(f"{key}: no result (the scenario did not run)")
        elif measured[key] < floor:
            problems.append(f"{key}: ratio {measured[key]:.2f}x is below the floor {floor:g}x")
    return problems


def load_floors(path: Path | None) -> dict[str, float]:
    """The ``[floors]`` table of a floors file (empty without one)."""
    return tomllib.loads(path.read_text()).get("floors", {}) if path else {}


def load_targets(path: Path | None) -> dict[str, float]:
    """The ``[targets]`` table of a floors file: the ratios the design aims for (charted,
    never enforced)."""
    return tomllib.loads(path.read_text()).get("targets", {}) if path else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--floors", type=Path, default=Path(__file__).with_name("floors.toml"))
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    rows = load_rows(json.loads(args.results.read_text()))
    floors = load_floors(args.floors)
    table = markdown(rows, floors)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    problems = check_floors(rows, floors)
    for p in problems:
        print(f"FLOOR MISSED: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
