"""Checks agent.data.yahpo against the official yahpo-gym package on random configurations.

yahpo-gym pins numpy<2 and ConfigSpace<=0.6.1, so it lives in its own virtual environment and this
script runs in two steps:

1. ``official`` (run with the yahpo-gym venv's python; imports nothing of this project): samples random
   configurations of several instances per scenario with yahpo-gym's own ConfigSpace, half at the full
   fidelity and half at a random fidelity, evaluates them with ``BenchmarkSet.objective_function``
   and writes configurations and outputs to a JSON file. It also dumps the per-scenario facts of
   yahpo-gym's configs, to check the built-in descriptors against.
2. ``compare`` (run with the project venv): evaluates the same configurations with
   :class:`agent.data.yahpo.YahpoScenario` and writes the max abs difference per output.

``all`` (project venv) runs both, the first through ``--yahpo-python``. Scenarios: any under
``--data-root`` whose data is there (yahpo_data layout; by default ../shared/benchmarks/yahpo, which
holds lcbench), plus the test fixture tests/bench/fixtures/yahpo_toy (two fidelities, conditional and
AND-conditional parameters), registered with yahpo-gym from its descriptor.json so both readers feed the
same surrogate. Set up the yahpo venv with:

    python3 -m venv /tmp/yahpo-venv
    /tmp/yahpo-venv/bin/pip install yahpo-gym "numpy<2" "ConfigSpace<=0.6.1"
    .venv/bin/python scripts/verify_yahpo.py all --yahpo-python /tmp/yahpo-venv/bin/python \
        --out metrics/yahpo_reader_check.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA_ROOT = REPO.parent / "shared" / "benchmarks" / "yahpo"
FIXTURES = REPO / "tests" / "bench" / "fixtures"
DEFAULT_TASKS = {
    "lcbench": ["3945", "7593", "34539", "126025", "146212", "167149", "168330", "189906"],
    "yahpo_toy": ["t1", "t2"],
}


def _plain(value):
    """numpy scalars of ConfigSpace as JSON numbers."""
    if hasattr(value, "item"):
        return value.item()
    return value


# -- step 1: official outputs (yahpo-gym venv) ------------------------------------------------------

def official(args: argparse.Namespace) -> None:
    data_root = Path(args.data_root).resolve()
    settings = Path(tempfile.mkdtemp()) / "yahpo_settings.yaml"
    settings.write_text(f"data_path: {data_root}\n")
    os.environ["YAHPO_LOCAL_CONFIG"] = str(settings)  # read when yahpo_gym is imported

    import ConfigSpace
    import onnxruntime
    import yahpo_gym
    from yahpo_gym import BenchmarkSet
    from yahpo_gym.configuration import cfg, config_dict

    facts = {}
    for key, raw in cfg().configs.items():
        facts[key] = {k: raw.get(k) for k in ("cont_names", "cat_names", "y_names", "y_minimize", "fidelity_params",
                                                "instance_names", "runtime_name", "instances", "drop_predict")}

    scenarios = [s for s in args.scenarios if (data_root / s / "model.onnx").is_file()]
    if args.fixture:
        toy = FIXTURES / "yahpo_toy"
        d = json.loads((toy / "descriptor.json").read_text())
        config_dict.update({"yahpo_toy": {
            "config_id": "yahpo_toy", "basedir": str(FIXTURES), "y_names": d["targets"],
            "y_minimize": [t not in d["maximize"] for t in d["targets"]], "cont_names": d["cont_names"],
            "cat_names": d["cat_names"], "fidelity_params": list(d["fidelities"]),
            "instance_names": d["instance_name"], "runtime_name": d.get("runtime_name"), "citation": None,
        }})
        scenarios.append("yahpo_toy")

    with contextlib.redirect_stdout(sys.stderr):  # yahpo-gym prints citations on stdout
        runs = [run for i, s in enumerate(scenarios) for run in _official_runs(BenchmarkSet, s, i, args)]
    Path(args.out).write_text(json.dumps({
        "official": {"yahpo_gym": yahpo_gym.__version__ if hasattr(yahpo_gym, "__version__") else _version("yahpo-gym"),
                     "ConfigSpace": ConfigSpace.__version__, "onnxruntime": onnxruntime.__version__},
        "n": args.n, "seed": args.seed, "facts": facts, "runs": runs,
    }))
    print(f"wrote {args.out}", file=sys.stderr)


def _official_runs(BenchmarkSet, scenario: str, s_i: int, args: argparse.Namespace) -> list[dict]:
    """Random configurations of several instances of one scenario, with yahpo-gym's outputs."""
    runs = []
    probe = BenchmarkSet(scenario, active_session=False)
    tasks = [t for t in (args.tasks or DEFAULT_TASKS.get(scenario) or probe.instances[:5]) if t in probe.instances]
    for t_i, task in enumerate(tasks):
        bench = BenchmarkSet(scenario, instance=task, multithread=False)
        seed = args.seed * 1000 + s_i * 100 + t_i
        space = bench.get_opt_space(drop_fidelity_params=True, seed=seed)
        fid_space = bench.get_fidelity_space(seed=seed + 1)
        full = {f: _plain(bench.config_space.get_hyperparameter(f).upper) for f in bench.config.fidelity_params}
        inst = bench.config.instance_names
        rows, feeds = [], []
        for i in range(args.n):
            conf = {k: _plain(v) for k, v in space.sample_configuration().get_dictionary().items() if k != inst}
            fid = full if i % 2 == 0 else {k: _plain(v) for k, v in fid_space.sample_configuration().get_dictionary().items()}
            rows.append({"config": conf, "fidelity": fid, "full_fidelity": i % 2 == 0})
            feeds.append({**conf, **fid, **({inst: task} if inst else {})})
        out = bench.objective_function(feeds)
        names = bench.config.y_names
        for row, o in zip(rows, out):
            row["outputs"] = [float(o[n]) for n in names]
        runs.append({"scenario": scenario, "folder": str(Path(bench.config.config_path).resolve()),
                     "task": task, "targets": list(names), "rows": rows})
    print(f"{scenario}: {len(tasks)} tasks x {args.n} configurations", file=sys.stderr)
    return runs


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


# -- step 2: our reader (project venv) ----------------------------------------------------------------

def compare(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(REPO))
    import numpy as np
    import onnxruntime

    from agent.data.yahpo import BUILTIN, YahpoScenario

    ref = json.loads(Path(args.official).read_text())
    scenarios: dict[str, dict] = {}
    loaded: dict[str, YahpoScenario] = {}
    for run in ref["runs"]:
        name = run["scenario"]
        if name not in loaded:
            loaded[name] = YahpoScenario.load(Path(run["folder"]))
        ours = loaded[name]
        if list(ours.targets) != run["targets"]:
            raise SystemExit(f"{name}: our targets {ours.targets} differ from yahpo-gym's {run['targets']}")
        # Full-fidelity rows go without fidelity values, so our descriptor's full values are checked too.
        configs = [r["config"] if r["full_fidelity"] else {**r["config"], **r["fidelity"]} for r in run["rows"]]
        got = ours.predict(run["task"], configs)
        want = np.array([r["outputs"] for r in run["rows"]], dtype=float)
        diff = np.abs(got - want).max(axis=0)
        entry = scenarios.setdefault(name, {"tasks": [], "configs": 0, "at_full_fidelity": 0,
                                            "max_abs_diff": dict.fromkeys(ours.targets, 0.0),
                                            "max_abs_value": dict.fromkeys(ours.targets, 0.0)})
        entry["tasks"].append(run["task"])
        entry["configs"] += len(configs)
        entry["at_full_fidelity"] += sum(r["full_fidelity"] for r in run["rows"])
        for j, t in enumerate(ours.targets):
            entry["max_abs_diff"][t] = max(entry["max_abs_diff"][t], float(diff[j]))
            entry["max_abs_value"][t] = max(entry["max_abs_value"][t], float(np.abs(want[:, j]).max()))
        if name == "yahpo_toy":
            entry["note"] = "test fixture registered with yahpo-gym from its descriptor.json (conditional space, 2 fidelities)"

    facts = {}
    for name, d in BUILTIN.items():
        f = ref["facts"].get(name)
        if f is None:
            facts[name] = "not in this yahpo-gym release"
            continue
        mine = {"cont_names": list(d.cont_names), "cat_names": list(d.cat_names), "y_names": list(d.targets),
                "fidelity_params": list(d.fidelities), "instance_names": d.instance_name,
                "runtime_name": d.runtime_name,
                "y_minimize": [not d.is_maximized(t) for t in d.targets]}
        if d.instance_name is None:
            mine["instances"] = list(d.instances)
        if d.drop_predict:
            mine["drop_predict"] = d.drop_predict[0] if len(d.drop_predict) == 1 else list(d.drop_predict)
        diffs = {k: {"ours": v, "yahpo_gym": f.get(k)} for k, v in mine.items() if f.get(k) != v}
        flipped = [t for t, a, b in zip(d.targets, mine["y_minimize"], f.get("y_minimize") or []) if a != b]
        if name.startswith("rbv2_") and set(diffs) == {"y_minimize"} and flipped == ["f1"]:
            diffs = "match, except f1 counted as maximised (deliberate; yahpo-gym 1.0.2 lists it as minimised)"
        facts[name] = diffs or "match"
    result = {
        "what": "agent.data.yahpo.YahpoScenario vs the official yahpo-gym BenchmarkSet.objective_function on the "
                "same random configurations (half at full fidelity, half at a random fidelity)",
        "official": ref["official"],
        "ours": {"onnxruntime": onnxruntime.__version__, "numpy": np.__version__},
        "seed": ref["seed"], "configs_per_task": ref["n"],
        "scenarios": scenarios,
        "builtin_descriptors_vs_yahpo_gym_configs": facts,
        "command": args.command or " ".join([Path(sys.executable).name] + sys.argv),
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for name, e in scenarios.items():
        print(f"{name}: {len(e['tasks'])} tasks, {e['configs']} configs, max abs diff "
              + ", ".join(f"{t}={v:.3g}" for t, v in e["max_abs_diff"].items()))
    for name, f in facts.items():
        if f != "match":
            print(f"descriptor {name}: {f}")
    return result


def run_all(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "official.json"
        cmd = [args.yahpo_python, str(Path(__file__).resolve()), "official", "--out", str(out),
               "--data-root", args.data_root, "--n", str(args.n), "--seed", str(args.seed), "--scenarios", *args.scenarios]
        if args.tasks:
            cmd += ["--tasks", *args.tasks]
        if not args.fixture:
            cmd.append("--no-fixture")
        subprocess.run(cmd, check=True)
        args.official = str(out)
        args.command = " ".join(["python", "scripts/verify_yahpo.py"] + sys.argv[1:])
        compare(args)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    for step in ("official", "all"):
        p = sub.add_parser(step)
        p.add_argument("--data-root", default=str(DATA_ROOT))
        p.add_argument("--scenarios", nargs="+", default=["lcbench"])
        p.add_argument("--tasks", nargs="+", default=None, help="instances (default: several per scenario)")
        p.add_argument("--n", type=int, default=250, help="random configurations per task")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--no-fixture", dest="fixture", action="store_false")
        p.add_argument("--out", required=step == "official")
    sub.choices["all"].add_argument("--yahpo-python", required=True)
    p = sub.add_parser("compare")
    p.add_argument("--official", required=True)
    p.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.command = None
    {"official": official, "compare": compare, "all": run_all}[args.step](args)


if __name__ == "__main__":
    main()
