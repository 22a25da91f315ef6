"""Which module a chapter runs, read from the course's catalog (``course/modules/*.toml``) and the
module's stubs: the learner file, the functions you write and the card section of each.

Chapters 1 to 5 run L10.8's ``spec.py``; chapters 6 and 7 L10.9's ``trees.py``; chapter 8
L10.10's ``serve.py`` (``course.use(module=...)``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from grader.layout.catalog import load_catalog

from course.state import STATE

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "solutions" / "tinyllm"
DEFAULT_MODULE = "L10.8"
# The reference's modules a chapter imports, in an order where each one's imports come first.
PACKAGE_MODULES = ("pcg32", "sampling", "kvpool", "spec", "model", "runner")
# Functions without side effects on their arguments: a panel may run the reference's beside yours
# on copies of the same inputs and say when the answers differ (verify_tree gets a copy of the
# generator). A teaching choice per chapter, not a fact of the catalog.
COMPARED = MappingProxyType({
    "L10.8": frozenset({"SpecConfig.parse", "prompt_lookup", "ngram_draft", "propose", "residual", "sample_dense",
                        "speculative_step", "dense_distribution", "verify_draft", "blocks_for"}),
    "L10.9": frozenset({"tree_depths", "tree_mask", "tree_positions", "tree_paths", "chain_tree",
                        "PromptLookupDrafter.propose", "trie_tree", "SuffixTreeDrafter.propose", "draft_q",
                        "verify_tree"}),
    "L10.10": frozenset({"observe", "survival", "expected_tokens", "gemm_blocks", "goodput", "adaptive_ks",
                         "choose_ks"}),
})
# A stub's message ends "see course/L10.8.md section 2.2" (or "section 2.2 and 2.3").
_SECTION = re.compile(r"section (\d+(?:\.\d+)*(?: and \d+(?:\.\d+)*)*)")


@dataclass(frozen=True)
class Chapter:
    """What the notebook runs, watches and checks for one module."""

    id: str
    learner_file: str               # e.g. spec.py
    stub: Path                      # the module's stub of it
    package_modules: tuple[str, ...]
    sections: dict[str, str]        # each function you write (name or Class.name): its card section
    compared: frozenset
    from_reference: str             # the banner's "... come from the reference"

    @property
    def stem(self) -> str:
        return self.learner_file.removesuffix(".py")

    @property
    def learner_module(self) -> str:
        return f"tinyllm.{self.stem}"

    def section(self, name: str) -> str | None:
        return self.sections.get(name)


def chapter(module_id: str = DEFAULT_MODULE) -> Chapter:
    """The chapter data of ``module_id``, from the catalog and the module's stub (read once per kernel)."""
    if module_id not in STATE.chapters:
        STATE.chapters[module_id] = _read_chapter(module_id)
    return STATE.chapters[module_id]


def _read_chapter(module_id: str) -> Chapter:
    catalog = load_catalog(ROOT)
    if module_id not in COMPARED or module_id not in catalog.modules:
        raise ValueError(f"no chapters for module {module_id!r}; expected one of {', '.join(COMPARED)}")
    module = catalog.get(module_id)
    learner_file = module.learner_files[0]
    stem = learner_file.removesuffix(".py")
    needs = catalog.needs_of(module)
    taken = ", ".join(f"{dep.id}'s {' '.join(dep.learner_files)}" for dep in needs)
    from_reference = (f"{taken} (as with ol check --ref-deps) and the given files come from the reference"
                      if needs else "the given files come from the reference")
    stub = module.stubs / learner_file
    return Chapter(module.id, learner_file, stub,
                   PACKAGE_MODULES + (() if stem in PACKAGE_MODULES else (stem,)),
                   stub_sections(stub), COMPARED[module.id], from_reference)


def stub_sections(stub: Path) -> dict[str, str]:
    """The functions you write (their body raises NotImplementedError in the stub), as ``name`` or
    ``Class.name``, each with the card section its stub's message names ("" when it names none)."""
    found: dict[str, str] = {}

    def raised(fn: ast.AST) -> str | None:
        for node in ast.walk(fn):
            if isinstance(node, ast.Raise) and node.exc is not None and "NotImplementedError" in ast.dump(node.exc):
                text = " ".join(n.value for n in ast.walk(node.exc)
                                if isinstance(n, ast.Constant) and isinstance(n.value, str))
                match = _SECTION.search(text)
                return match.group(1) if match else ""
        return None

    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.FunctionDef) and raised(node) is not None:
            found[node.name] = raised(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and raised(item) is not None:
                    found[f"{node.name}.{item.name}"] = raised(item)
    return found


def bench_workloads() -> dict[str, list[str]]:
    """The benchmark's prompts, ``WORKLOADS`` of ``bench/speculation.py``, read from its source
    (importing the script would put the reference package on ``sys.path``)."""
    tree = ast.parse((ROOT / "bench" / "speculation.py").read_text())
    return next(ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "WORKLOADS")
