"""Do isolated checks give the verdicts in-process checks give? The reference and every named pitfall.

    python bench/isolated_verdicts.py [L10.1 L10.8 L10.9]

For each module, the reference and each pitfall's mutant are checked twice: in process (as ``ol
check``) and isolated (as ``ol grade``: the module's own files in the learner's process, the
modules it needs and the given code from the reference). Prints one line per variant, then how
many of a module's variants got the same verdict on every test; exits 1 if any differ.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.core import sandbox  # noqa: E402
from grader.running import isolate  # noqa: E402
from grader.core.patch import apply_patch  # noqa: E402
from grader.layout.assemble import Source  # noqa: E402
from grader.layout.catalog import Catalog, Module, Pitfall, load_catalog  # noqa: E402
from grader.running.run import run_suite  # noqa: E402


def verdicts(catalog: Catalog, module: Module, pitfall: Pitfall | None, box: sandbox.Sandbox) -> tuple[dict, dict, float]:
    """Each test's status in process and isolated, and the isolated check's seconds."""
    with tempfile.TemporaryDirectory(prefix="ol-verdicts-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(catalog.root / "solutions", tree / "solutions")
        if pitfall is not None:
            error = apply_patch(module.root / pitfall.mutant, tree)
            if error:
                sys.exit(f"{pitfall.id}: {error}")
        package = tree / "solutions" / "tinyllm"
        plain = run_suite(module, package.parent)
        sources = [Source(f.name, f, "learner" if f.name in module.learner_files else "reference", "")
                   for f in sorted(package.glob("*.py"))]
        impl, env = isolate.prepare(sources, Path(tmp) / "isolated", box)
        started = time.monotonic()
        isolated = run_suite(module, impl, sandbox=box, env=env)
        return ({n: o.status for n, o in plain.outcomes.items()}, {n: o.status for n, o in isolated.outcomes.items()},
                time.monotonic() - started)


def main() -> int:
    catalog = load_catalog()
    ids = sys.argv[1:] or list(catalog.modules)
    sandbox.hide_memory()
    box = sandbox.claim()
    differ = 0
    for module_id in ids:
        module = catalog.get(module_id)
        variants = [None, *module.pitfalls]
        same = 0
        for pitfall in variants:
            plain, isolated, seconds = verdicts(catalog, module, pitfall, box)
            name = pitfall.id if pitfall else "reference"
            passed = sum(s == "pass" for s in isolated.values())
            if plain == isolated:
                same += 1
                print(f"{module.id} {name}: same ({passed} of {len(isolated)} pass; isolated {seconds:.1f} s)", flush=True)
            else:
                parted = {n: (plain.get(n), isolated.get(n)) for n in sorted(set(plain) | set(isolated))
                          if plain.get(n) != isolated.get(n)}
                print(f"{module.id} {name}: DIFFERENT (in process, isolated): {parted}", flush=True)
        differ += len(variants) - same
        print(f"{module.id}: {same} of {len(variants)} variants get the same verdicts isolated")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
