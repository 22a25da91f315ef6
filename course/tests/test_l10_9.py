"""Graded tests for L10.9, draft models and token trees (card: course/L10.9.md, section 4).

Each test is named after a row of the card's table and checks a list of cases (``grader.cases``):
``cases_<name>()`` builds them, ``test_<name>()`` checks them. The code under test is reached only
through ``tinyllm.*``; ``tree_fakes`` holds the tree-scoring fake target and the scripted generator.
"""

from dataclasses import replace

import numpy as np

from graded import DRAWN_RULE_CASES, drawn, load_fixture, reference
from grader.cases import Case, chi2_quantile, call, check, each, raises
from tinyllm.kvpool import KvPool
from tinyllm.model import LlamaConfig, TinyLlama
from tinyllm.pcg32 import Pcg32
from tinyllm.runner import RunnerTarget
from tinyllm.sampling import SamplingParams, stream
from tinyllm.trees import (DraftTree, ModelDrafter, PromptLookupDrafter, SuffixTreeDrafter, chain_tree, compact,
                           generate_tree, tree_depths, tree_mask, tree_paths, tree_positions, trie_tree, verify_tree)
from test_l10_8 import (GREEDY, drawn_cycle, drawn_round, f32_row, f64_row, judge_stream, params_text, plain_greedy,
                        random_requests, rows_text)
from tree_fakes import Script, TreeCycleTarget, TreeTableTarget

GOLDEN = "L10.9/trees_golden.json"
L10_8_GOLDEN = "L10.8/spec_golden.json"
_golden: dict[str, dict] = {}


def golden(section: str, fixture: str = GOLDEN) -> list[dict]:
    """A list of recorded cases from a golden fixture (each file read once per process)."""
    if fixture not in _golden:
        _golden[fixture] = load_fixture(fixture)
    if section not in _golden[fixture]:
        raise AssertionError(f"fixtures/{fixture} has no {section!r} cases; regenerate it with its oracle "
                             "(course/modules/L10.9.toml names it)")
    return _golden[fixture][section]


def tree_text(tree: DraftTree) -> str:
    probs = "None" if tree.probs is None else "[" + ", ".join(
        "None" if q is None else f"np.array({np.asarray(q).tolist()!r})" for q in tree.probs) + "]"
    return f"DraftTree({tree.tokens!r}, {tree.parents!r}, {probs})"


def peaked(vocab: int, top: int) -> np.ndarray:
    """A row of zeros with 2.0 at ``top``: its argmax is ``top``, its logprob 2 - ln(e^2 + vocab - 1)."""
    row = np.zeros(vocab, dtype=np.float32)
    row[top] = 2.0
    return row


PEAK_LOGPROB = 2.0 - float(np.log(np.exp(2.0) + 9))

# --- 2.1 The shape of a tree ----------------------------------------------------------------------

SHAPE_RULE = ("card 2.1: depth(0) = 0, depth(i) = depth(parents[i]) + 1; positions = start + depth; mask[j, i] "
              "iff i == j or i is an ancestor of j; paths root to leaf, leaves in node order")
HAND_PARENTS = [-1, 0, 0, 1, 1, 2]   # section 3's tree: 5 -> (7 -> (3, 9), 2 -> (4))
HAND_TOKENS = [5, 7, 2, 3, 9, 4]


def shape(start, parents):
    return {"depths": tree_depths(parents), "positions": tree_positions(start, parents),
            "paths": tree_paths(parents), "mask": np.asarray(tree_mask(parents)).astype(int).tolist()}


def shape_case(label, start, parents, want) -> Case:
    text = (f"(tree_depths({parents}), tree_positions({start}, {parents}), tree_paths({parents}), "
            f"tree_mask({parents}).astype(int))")
    return Case(label, text, lambda: shape(start, parents), want, SHAPE_RULE)


def cases_hand_example_tree_shape():
    hand = {"depths": [0, 1, 1, 2, 2, 2], "positions": [10, 11, 11, 12, 12, 12],
            "paths": [[0, 1, 3], [0, 1, 4], [0, 2, 5]],
            "mask": [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0],
                     [1, 1, 0, 1, 0, 0], [1, 1, 0, 0, 1, 0], [1, 0, 1, 0, 0, 1]]}
    chain = {"depths": [0, 1, 2, 3], "positions": [4, 5, 6, 7], "paths": [[0, 1, 2, 3]],
             "mask": [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]}
    return [
        shape_case("section 3's tree at start 10", 10, HAND_PARENTS, hand),
        shape_case("a chain is a causal block", 4, [-1, 0, 1, 2], chain),
        shape_case("the root alone", 0, [-1], {"depths": [0], "positions": [0], "paths": [[0]], "mask": [[1]]}),
        shape_case("a fan of siblings sees only the root", 3, [-1, 0, 0, 0],
                   {"depths": [0, 1, 1, 1], "positions": [3, 4, 4, 4], "paths": [[0, 1], [0, 2], [0, 3]],
                    "mask": [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1]]}),
    ] + drawn_shape_cases(drawn("hand_example_tree_shape"), DRAWN_RULE_CASES, 6)


def test_hand_example_tree_shape():
    check(cases_hand_example_tree_shape())


# Cases a recorded test draws when graded (graded.drawn), answered by the reference in the judge:
# every recorded case is public, and a table of them has no answer for these.
DRAWN_CASES = 8


def drawn_parents(draws, n: int) -> list[int]:
    """A tree of ``n`` nodes flattened by depth, as the fixture's oracle draws one."""
    depth_of, parents = [0], [-1]
    while len(parents) < n:
        last = max(depth_of)
        layer = [i for i, d in enumerate(depth_of) if d == last]
        for _ in range(draws.randint(1, 3)):
            if len(parents) == n:
                break
            parents.append(draws.choice(layer))
            depth_of.append(last + 1)
    order = sorted(range(n), key=lambda i: (depth_of[i], parents[i], i))
    index = {old: new for new, old in enumerate(order)}
    return [-1] + [index[parents[i]] for i in order[1:]]


def drawn_shape_cases(draws, count: int, most: int) -> list[Case]:
    """Trees of 1 to ``most`` nodes at a drawn start, their shapes the reference's, worked out in the judge."""
    cases = []
    for i in range(count if draws is not None else 0):
        parents, start = drawn_parents(draws, draws.randint(1, most)), draws.randint(0, 39)
        ref = reference("trees")
        want = {"depths": ref.tree_depths(parents), "positions": ref.tree_positions(start, parents),
                "paths": ref.tree_paths(parents), "mask": ref.tree_mask(parents).astype(int).tolist()}
        cases.append(shape_case(f"drawn-{i} (drawn when graded)", start, parents, want))
    return cases


def cases_tree_shape_matches_recorded():
    return ([shape_case(c["name"], c["start"], c["parents"], c["expect"]) for c in golden("shape")]
            + drawn_shape_cases(drawn("tree_shape_matches_recorded"), DRAWN_CASES, 12))


def test_tree_shape_matches_recorded():
    check(cases_tree_shape_matches_recorded(), "recorded tree")


def cases_tree_rejects_bad_parents():
    rule = ("card 2.1: parents[0] is -1, every other parent is an earlier node (an int: a bool, or a float such as "
            "1.0, is refused), depths never decrease along the list; anything else raises TreeError")
    bad = {"empty": [], "no root": [0, 0], "a second root": [-1, -1], "a parent after its child": [-1, 2, 0],
           "a node its own parent": [-1, 1], "depths that go back up": [-1, 0, 1, 0], "a bool parent": [-1, True],
           "a bool parent that would be in range": [-1, 0, True], "a float parent equal to a node": [-1, 0, 1.0]}
    cases = [call(f"{what}: {fn.__name__}", fn, parents, expected=raises("TreeError"), rule=rule)
             for what, parents in bad.items() for fn in (tree_depths, tree_mask, tree_paths)]
    cases += [call(f"{what}: tree_positions", tree_positions, 0, parents, expected=raises("TreeError"),
                   rule=rule + "; tree_positions validates through tree_depths")
              for what, parents in (("depths that go back up", [-1, 0, 1, 0]), ("a parent after its child", [-1, 2, 0]))]
    cases.append(call("a numpy integer parent", lambda: tree_depths([-1, np.int64(0), np.int64(1)]), expected=[0, 1, 2],
                      rule=rule + "; a numpy integer counts as an int", name="tree_depths([-1, np.int64(0), np.int64(1)])"))
    start_rule = ("card 2.1: start must be an int >= 0 (a bool, or a float such as 4.0, is refused); anything else "
                  "raises TreeError")
    return cases + [call(f"start = {start!r}: tree_positions", tree_positions, start, [-1, 0], expected=raises("TreeError"),
                         rule=start_rule) for start in (-1, 2.5, 4.0, True)]


def test_tree_rejects_bad_parents():
    check(cases_tree_rejects_bad_parents())


# --- 2.2 Drafters -----------------------------------------------------------------------------------

SUFFIX_RULE = ("card 2.2: the longest suffix (max_ngram down to min_ngram) with an earlier occurrence decides; "
               "up to width occurrences, latest first, each continued by up to k tokens, merged into a trie; "
               "keep the k nodes passed by the most continuations (ties to the node created first), "
               "flattened breadth-first with children in the same order")


def tree_shape(tree) -> dict:
    return {"tokens": [int(t) for t in tree.tokens], "parents": [int(p) for p in tree.parents]}


def suffix(ctx, pending, k, width, max_ngram=3, min_ngram=1):
    return tree_shape(SuffixTreeDrafter(k, width, max_ngram, min_ngram).propose(ctx, pending, k))


def suffix_case(label, ctx, pending, k, width, want, max_ngram=3, min_ngram=1) -> Case:
    text = f"SuffixTreeDrafter({k}, {width}, {max_ngram}, {min_ngram}).propose({ctx}, {pending}, {k})"
    return Case(label, text, lambda: suffix(ctx, pending, k, width, max_ngram, min_ngram), want, SUFFIX_RULE)


def cases_hand_example_suffix_tree():
    ctx = [1, 2, 3, 9, 1, 2, 3, 8, 1, 2, 3, 9, 5, 1, 2]
    return [
        # Section 3: the suffix [1 2 3] occurred at 8, 4 and 0 (latest first); 9 is passed twice.
        suffix_case("section 3", ctx, 3, 8, 4,
                    {"tokens": [3, 9, 8, 5, 1, 1, 2, 2, 3], "parents": [-1, 0, 0, 1, 2, 3, 4, 5, 7]}),
        suffix_case("section 3 with k = 6", ctx, 3, 6, 4,
                    {"tokens": [3, 9, 8, 5, 1, 2, 3], "parents": [-1, 0, 0, 1, 3, 4, 5]}),
        suffix_case("two older occurrences outvote the latest", [5, 1, 2, 7, 5, 1, 2, 7, 5, 1, 2, 8, 5, 1], 2, 4, 4,
                    {"tokens": [2, 7, 5, 1, 2], "parents": [-1, 0, 1, 2, 3]}),
        suffix_case("the votes first, then the latest text", [5, 1, 2, 7, 5, 1, 2, 7, 5, 1, 2, 8, 5, 1], 2, 6, 4,
                    {"tokens": [2, 7, 8, 5, 5, 1, 2], "parents": [-1, 0, 0, 1, 2, 3, 5]}),
        suffix_case("width 1 is prompt lookup", ctx, 3, 4, 1, {"tokens": [3, 9, 5, 1, 2], "parents": [-1, 0, 1, 2, 3]}),
        suffix_case("a run of one token: the latest start overlaps the suffix", [4, 4, 4], 4, 3, 4,
                    {"tokens": [4, 4], "parents": [-1, 0]}),
        suffix_case("no earlier occurrence: the root alone", [4, 5, 6], 7, 5, 3, {"tokens": [7], "parents": [-1]}),
        suffix_case("k = 0: the root alone", ctx, 3, 0, 4, {"tokens": [3], "parents": [-1]}),
    ] + [Case(f"trie_tree with budget {budget}: the root alone", f"trie_tree(3, [[9, 5], [9, 6]], {budget})",
              lambda budget=budget: tree_shape(trie_tree(3, [[9, 5], [9, 6]], budget)),
              {"tokens": [3], "parents": [-1]}, SUFFIX_RULE + "; no node below the root when budget <= 0")
         for budget in (0, -1)] + [
        Case("trie_tree: breadth-first, each node's children after it in rank order (not each level by rank)",
             "trie_tree(0, [[1, 5], [1, 6], [2, 8], [2, 8]], 5)",
             lambda: tree_shape(trie_tree(0, [[1, 5], [1, 6], [2, 8], [2, 8]], 5)),
             {"tokens": [0, 1, 2, 5, 6, 8], "parents": [-1, 0, 0, 1, 1, 2]}, SUFFIX_RULE)
    ] + drawn_suffix_cases(drawn("hand_example_suffix_tree"), DRAWN_RULE_CASES)


def test_hand_example_suffix_tree():
    check(cases_hand_example_suffix_tree())


def cases_suffix_tree_matches_recorded():
    return ([suffix_case(c["name"], c["ctx"], c["pending"], c["k"], c["width"], c["expect"], c["max_ngram"],
                         c["min_ngram"]) for c in golden("suffix_tree")]
            + drawn_suffix_cases(drawn("suffix_tree_matches_recorded"), DRAWN_CASES))


def drawn_suffix_cases(draws, count: int) -> list[Case]:
    """Contexts drawn periodic, as a stem with several continuations, or as noise, with drawn k, width
    and n-grams; the reference's trees, worked out in the judge."""
    cases = []
    for i in range(count if draws is not None else 0):
        kind = i % 3
        if kind == 0:  # periodic
            text = ([draws.randrange(9) for _ in range(draws.randint(2, 5))] * 8)[:draws.randint(6, 29)]
        elif kind == 1:  # a stem followed by several continuations
            stem, text = [draws.randrange(9) for _ in range(draws.randint(1, 3))], []
            for _ in range(draws.randint(2, 5)):
                text += stem + [draws.randrange(9) for _ in range(draws.randint(1, 3))]
            text += stem
        else:  # noise
            text = [draws.randrange(9) for _ in range(draws.randint(4, 24))]
        k, width, max_ngram = draws.randint(0, 10), draws.randint(1, 5), draws.randint(1, 3)
        min_ngram = draws.randint(1, max_ngram)
        tree = reference("trees").SuffixTreeDrafter(k, width, max_ngram, min_ngram).propose(text[:-1], text[-1], k)
        cases.append(suffix_case(f"drawn-{i} (drawn when graded)", text[:-1], text[-1], k, width, tree_shape(tree),
                                 max_ngram, min_ngram))
    return cases


def test_suffix_tree_matches_recorded():
    check(cases_suffix_tree_matches_recorded(), "recorded context")


DRAFT_CONFIG = LlamaConfig(vocab=12, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, hidden=32)


def draft_model(vocab: int = 12) -> TinyLlama:
    """A random draft llama with its embeddings scaled by 0.2, so its q is spread out (with tied
    embeddings at full scale a random llama is nearly one-hot on repeating its input)."""
    model = TinyLlama.random(replace(DRAFT_CONFIG, vocab=vocab), 3)
    return TinyLlama(model.config, {**model.weights, "tok_emb": model.weights["tok_emb"] * np.float32(0.2)})


class PassCounter:
    """A draft model that counts its passes where the test runs: what the drafter ran, not what it
    says it ran. The code under test may read its ``config`` and call ``forward``, ``forward_tree``
    and ``new_pool``."""

    OFFERED_VALUES = ("config",)

    def __init__(self, model: TinyLlama) -> None:
        self.model, self.config, self.passes = model, model.config, 0

    def forward(self, *args, **kwargs):
        self.passes += 1
        return self.model.forward(*args, **kwargs)

    def forward_tree(self, *args, **kwargs):
        self.passes += 1
        return self.model.forward_tree(*args, **kwargs)

    def new_pool(self, num_blocks: int, block_tokens: int):
        return self.model.new_pool(num_blocks, block_tokens)


def draft_answer(tree, passes) -> dict:
    return {"tokens": [int(t) for t in tree.tokens], "parents": [int(p) for p in tree.parents],
            "probs": None if tree.probs is None else
            [None if q is None else np.asarray(q, dtype=np.float64).tolist() for q in tree.probs],
            "passes": passes}


def drafted(params, k, seed, branch, ctx, pending, asked=None):
    """A fresh drafter of ``k`` tokens, asked for ``asked`` (``k`` unless given)."""
    model = PassCounter(draft_model())
    drafter = ModelDrafter(model, params, k, seed, branch)
    tree = drafter.propose(ctx, pending, k if asked is None else asked)
    return draft_answer(tree, model.passes)


def drafted_twice(params, k, seed, branch, ctx, pending):
    """One drafter's second proposal on the same context (its passes not compared: its cache holds the text)."""
    drafter = ModelDrafter(draft_model(), params, k, seed, branch)
    drafter.propose(ctx, pending, k)
    return draft_answer(drafter.propose(ctx, pending, k), None)


def softmax_at(row, temperature: float) -> np.ndarray:
    x = np.asarray(row, dtype=np.float64) / temperature
    z = np.exp(x - x.max())
    return z / z.sum()


def expected_draft(temperature, k, seed, branch, ctx, pending, rng=None):
    """Section 2.2's rule, worked with the given model and a softmax of its own: the chain first,
    the runners-up of the first row as leaves of the root; with no budget, the root alone and no pass.
    ``rng``: the drafter's generator where earlier proposals left it (a fresh ``Pcg32(seed, 55)`` if None)."""
    if k <= 0:
        return {"tokens": [pending], "parents": [-1], "probs": None, "passes": 0}
    model = draft_model()
    runner = RunnerTarget(model, model.new_pool(64, 16))
    rng = Pcg32(seed, 55) if rng is None else rng
    row = runner.extend(list(ctx) + [pending])[-1]
    siblings = min(branch - 1, k - 1)
    chain, qs, first = [], [], row
    for i in range(k - siblings):
        if temperature == 0.0:
            chain.append(int(np.argmax(row)))
        else:
            q = softmax_at(row, temperature)
            chain.append(int(np.searchsorted(np.cumsum(q), rng.next_f64(), side="right")))
            qs.append(q.tolist())
        if i + 1 < k - siblings:
            row = runner.extend([chain[-1]])[-1]
    score = first.astype(np.float64) if temperature == 0.0 else softmax_at(first, temperature)
    extra = [int(t) for t in np.lexsort((np.arange(12), -score)) if t != chain[0]][:siblings]
    m = len(extra)
    parents = [-1, 0] + [0] * m + ([1] if len(chain) > 1 else []) + list(range(m + 2, m + len(chain)))
    probs = None if temperature == 0.0 else [None, qs[0]] + [None] * m + qs[1:]
    return {"tokens": [pending, chain[0]] + extra + chain[1:], "parents": parents, "probs": probs,
            "passes": len(chain)}


def judge_draft(got, want) -> str | None:
    """Tokens and parents exactly; each q within 1e-6 (the draft llama's rows may differ in their last
    bits from the judge's, as when your code runs in a process of its own)."""
    if not isinstance(got, dict) or "tokens" not in got:
        return "not a draft tree"
    for key in ("tokens", "parents"):
        if got[key] != want[key]:
            return f"the {key} differ from the rule's"
    if got.get("passes") != want["passes"] and want["passes"] == 0:
        return (f"the draft model ran {got.get('passes')} passes, not 0: with no budget the tree is the root alone, "
                "and nothing is read")
    if got.get("passes") != want["passes"]:
        return (f"the draft model ran {got.get('passes')} passes, not {want['passes']}: one _read, then one "
                "_feed per chain token but the last (the last token's row is never used)")
    if (got["probs"] is None) != (want["probs"] is None):
        return "probs must be None exactly when every node is deterministic (temperature 0)"
    if want["probs"] is not None and len(got["probs"]) != len(want["probs"]):
        return f"{len(got['probs'])} entries in probs for a tree of {len(want['probs'])} nodes: one per node"
    for i, (a, b) in enumerate(zip(got["probs"] or [], want["probs"] or [])):
        if (a is None) != (b is None) or (a is not None and not np.allclose(a, b, rtol=0, atol=1e-6)):
            return f"probs[{i}] is not the q node {i}'s token was drawn from"
    return None


def cases_model_drafter_returns_its_q():
    rule = ("card 2.2: the draft model drafts a chain of k - (branch - 1) tokens, each drawn by walk(q, u) with "
            "q = distribution(its row, params, [], []) and u from Pcg32(seed, 55) (the argmax at temperature 0, "
            "probs None), and returns each q; branch - 1 runners-up of the first row join the root as leaves; "
            "one _read, then one _feed per chain token but the last; with budget min(self.k, k) <= 0 the root alone, "
            "read nothing")
    ctx, pending = [1, 4, 1, 5, 9, 2, 6], 5
    cases = []
    warm = SamplingParams(temperature=1.0)
    penalized = SamplingParams(temperature=1.0, repetition_penalty=2.0)
    rng = Pcg32(4, 55)
    expected_draft(1.0, 4, 4, 3, ctx, pending, rng)  # the first proposal's draws
    second = {**expected_draft(1.0, 4, 4, 3, ctx, pending, rng), "passes": None}
    cases += [
        Case("a drafter of 2 asked for 4 drafts 2",
             f"ModelDrafter(draft_model(), {params_text(warm)}, 2, 4, 3).propose({ctx}, {pending}, 4)",
             lambda: drafted(warm, 2, 4, 3, ctx, pending, asked=4), expected_draft(1.0, 2, 4, 3, ctx, pending),
             rule + "; budget = min(self.k, k)", judge=judge_draft),
        Case("penalties do not touch q",
             f"ModelDrafter(draft_model(), {params_text(penalized)}, 4, 4, 1).propose({ctx}, {pending}, 4)",
             lambda: drafted(penalized, 4, 4, 1, ctx, pending), expected_draft(1.0, 4, 4, 1, ctx, pending),
             rule + "; q takes no penalties (no context is passed)", judge=judge_draft),
        Case("a second proposal draws where the first stopped (none for the runners-up)",
             f"d = ModelDrafter(draft_model(), {params_text(warm)}, 4, 4, 3); d.propose({ctx}, {pending}, 4); "
             f"d.propose({ctx}, {pending}, 4)",
             lambda: drafted_twice(warm, 4, 4, 3, ctx, pending), second,
             rule + "; one draw per drafted chain token, none for the runners-up, from one generator", judge=judge_draft),
    ]
    for label, temperature, k, seed, branch in [("temperature 0.8", 0.8, 4, 5, 1), ("temperature 1.3", 1.3, 3, 9, 1),
                                                ("greedy: the argmax chain, no q", 0.0, 4, 0, 1),
                                                ("branch 3 at temperature 1", 1.0, 5, 2, 3), ("greedy branch 2", 0.0, 3, 0, 2),
                                                ("k 1 leaves no room for a runner-up", 1.0, 1, 4, 3),
                                                ("k 0: the root alone, the draft model not run", 1.0, 0, 4, 3)]:
        params = SamplingParams(temperature=temperature)
        text = (f"ModelDrafter(draft_model(), {params_text(params)}, {k}, {seed}, {branch})"
                f".propose({ctx}, {pending}, {k})")
        cases.append(Case(label, text, lambda a=(params, k, seed, branch, ctx, pending): drafted(*a),
                          expected_draft(temperature, k, seed, branch, ctx, pending), rule, judge=judge_draft))
    return cases


def test_model_drafter_returns_its_q():
    check(cases_model_drafter_returns_its_q())


# --- 2.3 Verifying a tree ---------------------------------------------------------------------------

GREEDY_RULE = ("card 2.3: from the root, take the penalized argmax of the node's row (ties to the lowest id); "
               "move to the first child holding it, or emit it and stop: the longest accepted path, then the "
               "bonus from the last accepted node's row; greedy draws nothing")
SAMPLED_RULE = ("card 2.3: at a node, try its children in node order: draw u_a then u_r (both, always), accept "
                "child c when u_a < p(c)/q(c), else p <- residual(p, q); after the last child is rejected emit "
                "walk(p, u_r); at a leaf the bonus is L10.1's sample (one draw)")


def verify_answer(rows, tree, params, prompt, output, rng):
    v = verify_tree(rows, tree, params, prompt, output, rng)
    after = rng.used if isinstance(rng, Script) else int(rng.next_u32())
    return {"tokens": [int(t) for t in v.tokens], "path": [int(i) for i in v.path],
            "logprobs": [float(x) for x in v.logprobs], "draws": after}


def verify_case(label, rows, tree, params, prompt, output, rng_text, make_rng, want, rule) -> Case:
    text = (f"rng = {rng_text}; v = verify_tree({rows_text(rows)}, {tree_text(tree)}, {params_text(params)}, "
            f"{list(prompt)!r}, {list(output)!r}, rng); (v.tokens, v.path, v.logprobs, "
            f"{'rng.used' if rng_text.startswith('Script') else 'rng.next_u32()'})")
    return Case(label, text, lambda: verify_answer(rows, tree, params, prompt, output, make_rng()), want, rule)


def greedy_hand_case(label, tops, want_tokens, want_path) -> Case:
    rows = [peaked(10, t) for t in tops]
    tree = DraftTree(HAND_TOKENS, HAND_PARENTS)
    want = {"tokens": want_tokens, "path": want_path, "logprobs": [PEAK_LOGPROB] * len(want_tokens),
            "draws": stream(7).next_u32()}
    return verify_case(label, rows, tree, GREEDY, [], [], "stream(7)", lambda: stream(7), want, GREEDY_RULE)


def cases_hand_example_greedy_tree():
    # Section 3's tree: 5 -> (7 -> (3, 9), 2 -> (4)); row j's argmax is tops[j].
    return [
        greedy_hand_case("section 3: the second branch, then the bonus", [2, 0, 4, 0, 0, 8], [2, 4, 8], [0, 2, 5]),
        greedy_hand_case("the first branch, its second child, the bonus", [7, 9, 0, 0, 6, 0], [7, 9, 6], [0, 1, 4]),
        greedy_hand_case("a correction at the root", [6, 3, 4, 0, 0, 0], [6], [0]),
        greedy_hand_case("a correction below an accepted node", [7, 1, 0, 0, 0, 0], [7, 1], [0, 1]),
        verify_case("one row for two nodes", [peaked(10, 0)], DraftTree([0, 1], [-1, 0]), GREEDY, [], [], "stream(7)",
                    lambda: stream(7), raises("TreeError"),
                    "card 2.3: verify_tree first calls _check_round(rows, tree) (given): a row per node, else TreeError"),
        verify_case("a node past the vocabulary", [peaked(10, 0)] * 2, DraftTree([0, 12], [-1, 0]), GREEDY, [], [],
                    "stream(7)", lambda: stream(7), raises("TreeError"),
                    "card 2.3: verify_tree first calls _check_round(rows, tree) (given): node tokens in the vocabulary"),
    ] + drawn_greedy_hand_cases(drawn("hand_example_greedy_tree"))


def drawn_greedy_hand_cases(draws) -> list[Case]:
    """When graded: section 3's tree under rows peaked at drawn ids, each most often one of its node's
    children's tokens, so paths go deep; the reference verifies them in the judge."""
    if draws is None:
        return []
    trees, sampling = reference("trees"), reference("sampling")
    cases = []
    for i in range(DRAWN_RULE_CASES):
        tops = []
        for j in range(len(HAND_TOKENS)):
            children = [HAND_TOKENS[c] for c, parent in enumerate(HAND_PARENTS) if parent == j]
            tops.append(draws.choice(children) if children and draws.random() < 0.7 else draws.randrange(10))
        rows, rng = [peaked(10, t) for t in tops], sampling.stream(7)
        v = trees.verify_tree(rows, trees.DraftTree(HAND_TOKENS, HAND_PARENTS), sampling.SamplingParams(), [], [], rng)
        want = {"tokens": [int(t) for t in v.tokens], "path": [int(j) for j in v.path],
                "logprobs": [float(x) for x in v.logprobs], "draws": int(rng.next_u32())}
        cases.append(verify_case(f"drawn-{i}: row argmaxes {tops} (drawn when graded)", rows,
                                 DraftTree(HAND_TOKENS, HAND_PARENTS), GREEDY, [], [], "stream(7)", lambda: stream(7),
                                 want, GREEDY_RULE))
    return cases


def test_hand_example_greedy_tree():
    check(cases_hand_example_greedy_tree())


SIB_ROW = np.log(np.array([0.4, 0.3, 0.2, 0.1])).astype(np.float32)
SIB_Q = np.array([0.1, 0.6, 0.2, 0.1])
TIE_ROW = np.array([0.0, 0.0], dtype=np.float32)
TIE_LEAF = np.array([0.0, 3.0], dtype=np.float32)


def cases_hand_example_sampled_siblings():
    # Section 3: p = [0.4 0.3 0.2 0.1]; node 1 offers 0 (deterministic), node 2 offers 1 drawn from SIB_Q.
    tree = DraftTree([3, 0, 1], [-1, 0, 0], [None, None, SIB_Q])
    leaf = np.array([0, 0, 3, 0], dtype=np.float32)
    rows = [SIB_ROW, leaf, leaf]
    prm = SamplingParams(temperature=1.0)
    x = SIB_ROW.astype(np.float64)
    lp = (x - np.log(np.exp(x).sum())).tolist()
    leaf_lp = 3.0 - float(np.log(np.exp(3.0) + 3))

    def case(label, draws, want):
        return verify_case(label, rows, tree, prm, [], [], f"Script({draws})", lambda: Script(draws), want, SAMPLED_RULE)

    return [
        case("section 3: both siblings rejected, the residual's walk", [0.7, 0.0, 0.9, 0.5],
             {"tokens": [2], "path": [0], "logprobs": [lp[2]], "draws": 4}),
        case("the first sibling kept: u_a = 0.3 < 0.4, then the leaf's bonus", [0.3, 0.99, 0.1],
             {"tokens": [0, 2], "path": [0, 1], "logprobs": [lp[0], leaf_lp], "draws": 3}),
        case("the second sibling kept against the residual: 0.8 < 0.5 / 0.6", [0.7, 0.0, 0.8, 0.0, 0.1],
             {"tokens": [1, 2], "path": [0, 2], "logprobs": [lp[1], leaf_lp], "draws": 5}),
        case("the second sibling rejected at 0.84 > 0.5 / 0.6; u_r = 0.7 walks to 3", [0.7, 0.0, 0.84, 0.7],
             {"tokens": [3], "path": [0], "logprobs": [lp[3]], "draws": 4}),
    ] + [
        # p = [0.5 0.5] exactly (two equal logits), so u_a can equal p(0) / q(0) = 0.5 to the last bit.
        verify_case(f"u_a = {u_a!r} against p / q = 0.5: {'rejects' if u_a == 0.5 else 'accepts'} (strictly below)",
                    [TIE_ROW, TIE_LEAF], DraftTree([1, 0], [-1, 0]), prm, [], [], f"Script({draws})",
                    lambda draws=draws: Script(draws), want, SAMPLED_RULE)
        for u_a, draws, want in (
            (0.5, [0.5, 0.3, 0.1], {"tokens": [1], "path": [0], "logprobs": [-float(np.log(2.0))], "draws": 2}),
            (float(np.nextafter(0.5, 0.0)), [float(np.nextafter(0.5, 0.0)), 0.3, 0.1],
             {"tokens": [0, 1], "path": [0, 1], "logprobs": [-float(np.log(2.0)), 3.0 - float(np.log(1 + np.exp(3.0)))],
              "draws": 3}))
    ] + drawn_sibling_cases(drawn("hand_example_sampled_siblings"), rows, tree, prm)


def drawn_sibling_cases(draws, rows, tree, prm) -> list[Case]:
    """When graded: section 3's siblings under drawn u values (each below 1, enough for any round);
    the reference verifies them in the judge."""
    if draws is None:
        return []
    trees, sampling = reference("trees"), reference("sampling")
    cases = []
    for i in range(DRAWN_RULE_CASES):
        us = [round(draws.random(), 3) for _ in range(6)]
        script = Script(us)
        v = trees.verify_tree(rows, trees.DraftTree(tree.tokens, tree.parents, tree.probs),
                              sampling.SamplingParams(temperature=prm.temperature), [], [], script)
        want = {"tokens": [int(t) for t in v.tokens], "path": [int(j) for j in v.path],
                "logprobs": [float(x) for x in v.logprobs], "draws": script.used}
        cases.append(verify_case(f"drawn-{i}: u = {us} (drawn when graded)", rows, tree, prm, [], [], f"Script({us})",
                                 lambda us=us: Script(us), want, SAMPLED_RULE))
    return cases


def test_hand_example_sampled_siblings():
    check(cases_hand_example_sampled_siblings())


def recorded_verify_case(c: dict) -> Case:
    t = c["tree"]
    probs = None if t["probs"] is None else [None if q is None else f64_row(q) for q in t["probs"]]
    tree = DraftTree(t["tokens"], t["parents"], probs)
    params = SamplingParams(**c["params"])
    want = {"tokens": c["expect"]["tokens"], "path": c["expect"]["path"], "logprobs": c["expect"]["logprobs"],
            "draws": c["expect"]["next_u32"]}
    return verify_case(c["name"], [f32_row(r) for r in c["rows"]], tree, params, c["prompt"], c["output"],
                       f"stream({c['seed']})", lambda: stream(c["seed"]), want,
                       GREEDY_RULE if params.temperature == 0 else SAMPLED_RULE)


def drawn_verify_case(draws, i: int) -> Case:
    """A tree round the reference verifies in the judge, drawn as the recorded ones are: their
    sampling settings, a chain or a tree, some nodes with a q, some the target's own argmax."""
    trees, vocab = reference("trees"), 8
    gen = np.random.default_rng(draws.getrandbits(64))
    n = draws.randint(1, 8)
    parents = list(range(-1, n - 1)) if i % 2 else drawn_parents(draws, n)
    rows = (2.0 * gen.standard_normal((n, vocab))).astype(np.float32)
    params = draws.choice([c["params"] for c in golden("verify")])
    tokens, probs = [draws.randrange(vocab)], [None]
    for j in range(1, n):
        q = gen.dirichlet(np.ones(vocab)) if params.get("temperature") and draws.random() < 0.5 else None
        if q is not None:
            token = int(np.argmax(q)) if draws.random() < 0.5 else int(gen.choice(vocab, p=q))
        else:
            token = int(np.argmax(rows[parents[j]])) if draws.random() < 0.6 else draws.randrange(vocab)
        tokens.append(token)
        probs.append(q)
    has_q = any(q is not None for q in probs)
    prompt = [draws.randrange(vocab) for _ in range(draws.randint(0, 4))]
    output = [draws.randrange(vocab) for _ in range(draws.randint(0, 3))]
    seed = draws.getrandbits(64)
    rng = reference("sampling").stream(seed)
    v = trees.verify_tree(list(rows), trees.DraftTree(tokens, parents, probs if has_q else None),
                          reference("sampling").SamplingParams(**params), prompt, output, rng)
    want = {"tokens": [int(t) for t in v.tokens], "path": [int(j) for j in v.path],
            "logprobs": [float(x) for x in v.logprobs], "draws": int(rng.next_u32())}
    prm = SamplingParams(**params)
    return verify_case(f"drawn-{i} (drawn when graded)", list(rows), DraftTree(tokens, parents, probs if has_q else None),
                       prm, prompt, output, f"stream({seed})", lambda: stream(seed), want,
                       GREEDY_RULE if prm.temperature == 0 else SAMPLED_RULE)


def cases_verify_tree_matches_recorded():
    cases = [recorded_verify_case(c) for c in golden("verify")]
    draws = drawn("verify_tree_matches_recorded")
    return cases + [drawn_verify_case(draws, i) for i in range(DRAWN_CASES if draws is not None else 0)]


def test_verify_tree_matches_recorded():
    check(cases_verify_tree_matches_recorded(), "recorded round")


def chain_shape(tree: DraftTree) -> dict:
    return {"tokens": [int(t) for t in tree.tokens], "parents": [int(p) for p in tree.parents],
            "probs": None if tree.probs is None else
            [None if q is None else np.asarray(q, dtype=np.float64).tolist() for q in tree.probs]}


def chain_answer(root, draft, probs, want_chain, rows, params, prompt, output, seed):
    """chain_tree's tree, then (only when it is the chain the card defines) what verify_tree does with it."""
    tree = chain_tree(root, draft, probs)
    got = {"chain_tree": chain_shape(tree)}
    if got["chain_tree"] != want_chain:
        return got
    return {**got, **verify_answer(rows, tree, params, prompt, output, stream(seed))}


CHAIN_RULE = ("card 2.2 and 2.3: chain_tree(pending, draft, probs) is tokens [pending, *draft], parents "
              "[-1, 0, .., m-1], probs None or [None, *probs]; a chain tree draws what L10.8's verify_draft draws (u_a "
              "then u_r at every position, one draw for a sampled bonus) and emits the same tokens and logprobs")


def chain_root(prompt) -> int:
    """The root of an L10.8 round's chain: the prompt's last token (0 for an empty prompt)."""
    return prompt[-1] if prompt else 0


def chain_case(label, rows, draft, probs, params, prompt, output, seed, want) -> Case:
    """An L10.8 round as a chain; ``want`` holds the chain (``chain_tree``) and what verify_tree does with it."""
    root = chain_root(prompt)
    probs_text = "None" if probs is None else "[" + ", ".join(f"np.array({q.tolist()!r})" for q in probs) + "]"
    text = (f"tree = chain_tree({root}, {draft!r}, {probs_text}); rng = stream({seed}); "
            f"v = verify_tree({rows_text(rows)}, tree, {params_text(params)}, {prompt!r}, {output!r}, "
            "rng); (tree, v.tokens, v.path, v.logprobs, rng.next_u32())")
    return Case(label, text, lambda: chain_answer(root, draft, probs, want["chain_tree"], rows, params, prompt, output,
                                                  seed), want, CHAIN_RULE)


def drawn_chain_case(draws, i: int) -> Case:
    """A round drawn as L10.8's drawn ones are, which the reference's chain_tree and verify_tree
    answer in the judge."""
    trees, sampling = reference("trees"), reference("sampling")
    r = drawn_round(draws)
    tree = trees.chain_tree(chain_root(r["prompt"]), r["draft"], r["probs"])
    rng = sampling.stream(r["seed"])
    v = trees.verify_tree(r["rows"], tree, sampling.SamplingParams(**r["params"]), r["prompt"], r["output"], rng)
    want = {"chain_tree": chain_shape(tree), "tokens": [int(t) for t in v.tokens], "path": [int(j) for j in v.path],
            "logprobs": [float(x) for x in v.logprobs], "draws": int(rng.next_u32())}
    return chain_case(f"drawn-{i} (drawn when graded)", r["rows"], r["draft"], r["probs"],
                      SamplingParams(**r["params"]), r["prompt"], r["output"], r["seed"], want)


def cases_chain_tree_verifies_as_l10_8():
    cases = []
    for c in golden("verify", L10_8_GOLDEN):
        probs = None if c["draft_probs"] is None else [f64_row(q) for q in c["draft_probs"]]
        chain = {"tokens": [chain_root(c["prompt"]), *c["draft"]], "parents": list(range(-1, len(c["draft"]))),
                 "probs": None if probs is None else [None, *(q.tolist() for q in probs)]}
        want = {"chain_tree": chain, "tokens": c["expect"]["tokens"],
                "path": list(range(c["expect"]["n_accepted"] + 1)), "logprobs": c["expect"]["logprobs"],
                "draws": c["expect"]["next_u32"]}
        cases.append(chain_case(c["name"], [f32_row(r) for r in c["rows"]], c["draft"], probs,
                                SamplingParams(**c["params"]), c["prompt"], c["output"], c["seed"], want))
    draws = drawn("chain_tree_verifies_as_l10_8")
    return cases + [drawn_chain_case(draws, i) for i in range(DRAWN_CASES if draws is not None else 0)]


def test_chain_tree_verifies_as_l10_8():
    check(cases_chain_tree_verifies_as_l10_8(), "L10.8 round")


# --- 2.3 The law of sampled output ------------------------------------------------------------------

STAT_SEEDS = 4000
STAT_POOL_AT = 1e-3
STAT_P_VALUE = 1e-4  # the threshold is chi2's (1 - 1e-4) quantile; see course/L10.9.md section 4
STAT_ROW = [1.2, 1.0, 0.4, 0.9, -5.0, -6.5]
STAT_Q = [0.3, 0.35, 0.05, 0.2, 0.1, 0.0]
STAT_PROMPT = [3, 1, 4, 1, 5]


def stat_law(row) -> np.ndarray:
    x = np.asarray(row, dtype=np.float32).astype(np.float64)
    p = np.exp(x - x.max())
    return p / p.sum()


def sibling_counts(kind: str) -> list[int]:
    """How often each id is the first emitted token over 4000 seeds, for one kind of root fan."""
    row = np.array(STAT_ROW, dtype=np.float32)
    leaf = np.zeros(6, dtype=np.float32)
    q = np.array(STAT_Q)
    prm = SamplingParams(temperature=1.0)
    draws = np.random.default_rng(2025).random((STAT_SEEDS, 3))
    trees: dict[tuple, DraftTree] = {}   # one DraftTree per distinct fan, built once
    calls = []
    for seed, s in enumerate(each(stream, [(seed,) for seed in range(STAT_SEEDS)])):
        # one-hot: the two likeliest ids, chosen deterministically; iid: three children drawn
        # independently from q, duplicates allowed
        kids = (0, 1) if kind == "one-hot" else tuple(np.searchsorted(np.cumsum(q), draws[seed], side="right").tolist())
        if kids not in trees:
            trees[kids] = DraftTree([0, *kids], [-1] + [0] * len(kids), None if kind == "one-hot" else [None] + [q] * len(kids))
        calls.append(([row] + [leaf] * len(kids), trees[kids], prm, [], [], s))
    counts = [0] * 6
    for v in each(verify_tree, calls):
        counts[int(v.tokens[0])] += 1
    return counts


MODEL_SEEDS = 1000


def model_drafter_counts() -> list[int]:
    """The first emitted token over 1000 rounds: the draft model's sampled child and its runner-up
    under the root, verified against the table target's rows (its next generator draw each round)."""
    drafter = ModelDrafter(draft_model(6), SamplingParams(temperature=1.0), 2, 0, 2)
    target = TreeTableTarget(6, 17, order=1, scale=1.0)
    calls = []
    streams = each(stream, [(seed,) for seed in range(MODEL_SEEDS)])
    trees = each(drafter.propose, [(STAT_PROMPT[:-1], STAT_PROMPT[-1], 2) for _ in range(MODEL_SEEDS)])
    for s, tree in zip(streams, trees):
        rows = [target._logits_at(STAT_PROMPT + [tree.tokens[i] for i in path[1:]])
                for path in ([0], [0, 1], [0, 2])[:len(tree.tokens)]]
        calls.append((rows, tree, SamplingParams(temperature=1.0), [], [], s))
    counts = [0] * 6
    for v in each(verify_tree, calls):
        counts[int(v.tokens[0])] += 1
    return counts


def judge_law(law, seeds):
    def judge(counts, _expected) -> str | None:
        if not isinstance(counts, list) or len(counts) != len(law):
            return "not a list of counts"
        big = law > STAT_POOL_AT
        c = np.asarray(counts, dtype=np.float64)
        observed, expected = c[big], seeds * law[big]
        if not big.all():
            observed, expected = np.append(observed, c[~big].sum()), np.append(expected, seeds * law[~big].sum())
        statistic = float(((observed - expected) ** 2 / expected).sum())
        threshold = chi2_quantile(len(observed) - 1, STAT_P_VALUE)
        if statistic < threshold:
            return None
        return (f"the first token's chi-square is {statistic:.1f} on {len(observed) - 1} degrees of freedom, "
                f"above {threshold:.1f}: not the target's law")
    return judge


def cases_sampled_tree_keeps_the_target_law():
    rule = ("card 2.3: multi-candidate accept-or-resample (the residual updated after every rejected child) "
            "emits each token with the target's probability, whatever the tree")
    law = stat_law(STAT_ROW)
    target_law = stat_law(TreeTableTarget(6, 17, order=1, scale=1.0)._logits_at(STAT_PROMPT))

    def law_case(label, text, run, p, seeds=STAT_SEEDS):
        return Case(label, text, run, [round(seeds * float(x), 1) for x in p], rule, judge=judge_law(p, seeds),
                    compare="law")

    return [
        law_case("two deterministic siblings, the likeliest ids",
                 f"for seeds 0..3999: verify_tree([row, leaf, leaf], DraftTree([0, 0, 1], [-1, 0, 0]), "
                 f"SamplingParams(temperature=1.0), [], [], stream(seed)).tokens[0] with row = {STAT_ROW} "
                 "(sibling_counts('one-hot') in ol shell)", lambda: sibling_counts("one-hot"), law),
        law_case("three siblings drawn independently from q",
                 f"for seeds 0..3999: three children drawn from q = {STAT_Q}, probs [None, q, q, q] "
                 "(sibling_counts('iid') in ol shell)", lambda: sibling_counts("iid"), law),
        law_case("the draft model's sampled child and its runner-up",
                 "model_drafter_counts()   # helper of course/tests/test_l10_9.py (ol shell has it)",
                 model_drafter_counts, target_law, MODEL_SEEDS),
    ]


def test_sampled_tree_keeps_the_target_law():
    check(cases_sampled_tree_keeps_the_target_law())


# --- 2.4 Compaction -----------------------------------------------------------------------------------

COMPACT_RULE = ("card 2.4: the K and V of node path[d], every layer, move from slot start + path[d] to slot "
                "start + d; then L10.8's rollback to start + len(path) returns the blocks no longer needed")


def compacted(start, fills, path, pool_class=KvPool, squash=compact):
    """A pool whose every slot holds its own position (layer l adds 100 l; V is minus K), compacted
    (``pool_class`` and ``squash``: the reference's, where the judge works out a drawn case's answer)."""
    pool = pool_class(8, 4, layers=2, kv_heads=1, head_dim=2)
    table = []
    for n in fills:
        b = pool.allocate()
        pool.set_fill(b, n)
        table.append(b)
    for p in range(sum(fills)):
        for layer in range(2):
            pool.k[layer, table[p // 4], p % 4] = p + 100 * layer
            pool.v[layer, table[p // 4], p % 4] = -(p + 100 * layer)
    before = list(table)
    released = squash(pool, table, start, path)
    keep = start + len(path)
    at = [(table[p // 4], p % 4) for p in range(keep)]
    return {"released": released, "table": len(table), "fills": [pool.fill(b) for b in table],
            "k layer 0": [float(pool.k[0, b, s, 0, 0]) for b, s in at],
            "k layer 1": [float(pool.k[1, b, s, 0, 1]) for b, s in at],
            "v layer 1": [float(pool.v[1, b, s, 0, 0]) for b, s in at],
            "free": pool.num_free(), "freed": [pool.refcount(b) == 0 for b in before[len(table):]]}


def compact_case(label, start, fills, path, want) -> Case:
    text = (f"pool, table = compacted_pool({fills}); compact(pool, table, {start}, {path})   "
            "# compacted(): course/tests/test_l10_9.py (ol shell has it)")
    return Case(label, text, lambda: compacted(start, fills, path), want, COMPACT_RULE)


def cases_hand_example_compaction():
    def moved(slots):
        return {"k layer 0": [float(s) for s in slots], "k layer 1": [float(s + 100) for s in slots],
                "v layer 1": [float(-(s + 100)) for s in slots]}

    return [
        # Section 3: 5 cached positions, a tree of 6 nodes at slots 5..10, keep nodes [0 2 5].
        compact_case("section 3: keep [0 2 5] of a tree at 5", 5, [4, 4, 3], [0, 2, 5],
                     {"released": 1, "table": 2, "fills": [4, 4], **moved([0, 1, 2, 3, 4, 5, 7, 10]),
                      "free": 6, "freed": [True]}),
        compact_case("the root alone", 5, [4, 4, 3], [0],
                     {"released": 1, "table": 2, "fills": [4, 2], **moved([0, 1, 2, 3, 4, 5]), "free": 6,
                      "freed": [True]}),
        compact_case("a path that crosses into the next block", 2, [4, 4, 4], [0, 3, 6],
                     {"released": 1, "table": 2, "fills": [4, 1], **moved([0, 1, 2, 5, 8]), "free": 6,
                      "freed": [True]}),
        compact_case("a path already in place moves nothing", 4, [4, 4], [0, 1, 2],
                     {"released": 0, "table": 2, "fills": [4, 3], **moved([0, 1, 2, 3, 4, 5, 6]), "free": 6,
                      "freed": []}),
        compact_case("a path that does not start at the root", 4, [4, 4], [1, 2], raises("TreeError")),
        compact_case("a path that goes back", 4, [4, 4], [0, 3, 2], raises("TreeError")),
        compact_case("a node one past the table's last slot", 4, [4, 4], [0, 4], raises("TreeError")),
        compact_case("a node twice", 4, [4, 4], [0, 2, 2], raises("TreeError")),
        compact_case("a bool start", True, [4, 4], [0, 1], raises("TreeError")),
        compact_case("a float start", 2.5, [4, 4], [0, 1], raises("TreeError")),
        compact_case("an empty path", 4, [4, 4], [], raises("TreeError")),
        compact_case("a negative start", -1, [4, 4], [0, 1], raises("TreeError")),
    ] + drawn_compaction_cases(drawn("hand_example_compaction"))


def drawn_compaction_cases(draws) -> list[Case]:
    """A tree at a drawn start filling a drawn table, a drawn path kept (the root, then later nodes in
    order); the reference's pool and compact answer it in the judge."""
    cases = []
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        fills = [4] * draws.randint(0, 3) + [draws.randint(1, 4)]
        start = draws.randrange(sum(fills))
        nodes = sum(fills) - start
        path = [0] + sorted(draws.sample(range(1, nodes), draws.randint(0, nodes - 1)))
        want = compacted(start, fills, path, reference("kvpool").KvPool, reference("trees").compact)
        cases.append(compact_case(f"drawn-{i}: keep {path} of a tree at {start} (drawn when graded)", start, fills,
                                  path, want))
    return cases


def test_hand_example_compaction():
    check(cases_hand_example_compaction())


def conserved_request(request: int, prompt, k, width, max_new):
    target = TreeTableTarget(5, request, order=2, scale=1.0, num_blocks=64, block_tokens=4)
    rounds = {"n": 0, "compaction": None}
    keep = target.keep_path

    def checked_keep(start, path):
        before = target._cached_ids()   # the prefix, then the tree's nodes
        keep(start, path)   # compacts, then checks the blocks and fills (KvCorrupt otherwise)
        rounds["n"] += 1
        kept = target._cached_ids()   # every kept position reads back the same id in every layer, K and V
        want = before[:start] + [before[start + i] for i in path]
        if kept != want and rounds["compaction"] is None:
            rounds["compaction"] = {"round": rounds["n"], "start": start, "path": [int(i) for i in path],
                                    "nodes": before[start:], "kept": kept[start:], "want": want[start:]}

    target.keep_path = checked_keep
    g = generate_tree(target, SuffixTreeDrafter(k, width), prompt, SamplingParams(temperature=1.0), request,
                      max_new, [])
    ids = target._cached_ids()
    text = (prompt + [int(t) for t in g.tokens])[:len(ids)]
    target.release()
    wrong = next((i for i, (a, b) in enumerate(zip(ids, text)) if a != b), None)
    return {"leaked": target.pool.num_blocks - target.pool.num_free(), "rounds": rounds["n"],
            "tree rounds": len(target.tree_sizes), "cache holds the emitted text": ids == text,
            "first wrong compaction": rounds["compaction"],
            "first wrong position": None if wrong is None else {"position": wrong, "cache": ids[wrong], "text": text[wrong]},
            "rejected": g.stats.drafted - g.stats.accepted, "emitted": len(g.tokens), "max_new": max_new}


def cases_blocks_conserved_across_tree_rounds():
    cases = []
    for request, rng, drawn_label in random_requests(drawn("blocks_conserved_across_tree_rounds"), 99, 150):
        prompt = (rng.integers(0, 5, size=int(rng.integers(1, 4))).tolist() * 5)[:int(rng.integers(1, 12))]
        k, width, max_new = int(rng.integers(1, 11)), int(rng.integers(1, 5)), int(rng.integers(1, 16))
        text = (f"target = TreeTableTarget(5, {request}, order=2, scale=1.0); generate_tree(target, "
                f"SuffixTreeDrafter({k}, {width}), {prompt}, SamplingParams(temperature=1.0), {request}, {max_new}, "
                "[]); target.release()   # conserved_request() in course/tests/test_l10_9.py (ol shell has it)")
        cases.append(Case(f"request {request}{drawn_label}", text,
                          lambda a=(request, prompt, k, width, max_new): conserved_request(*a),
                          {"leaked": 0, "cache holds the emitted text": True},
                          COMPACT_RULE + "; after every round the blocks and fills match the cached positions",
                          judge=judge_conserved))
    return cases


def judge_conserved(got, _expected) -> str | None:
    """The first thing that went wrong, and whose it is: compact's, when a keep_path left other ids
    than the path's nodes; generate_tree's, when every compaction kept what it was asked to."""
    if not isinstance(got, dict) or "leaked" not in got:
        return ""
    if got["leaked"]:
        return f"{got['leaked']} blocks still in use after the request released its table: leaked"
    if got["emitted"] != got["max_new"]:
        return (f"{got['emitted']} tokens emitted for max_new {got['max_new']}: with no EOS and no listener, "
                "a request emits max_new")
    if got["rounds"] != got["tree rounds"]:
        return f"{got['rounds']} keep_path calls for {got['tree rounds']} trees: one per round"
    c = got["first wrong compaction"]
    if c:
        return (f"compact in round {c['round']}: keeping path {c['path']} of the tree's nodes {c['nodes']} "
                f"(fed at {c['start']}) left {c['kept']} cached from there; the path's nodes are {c['want']}")
    if not got["cache holds the emitted text"]:
        w = got["first wrong position"]
        where = (f"position {w['position']} holds {w['cache']} where the prompt and the emitted tokens have "
                 f"{w['text']}" if w else "it holds fewer or more positions")
        return (f"every compaction kept its path, yet the cache does not hold the prompt and the emitted tokens: "
                f"{where}; generate_tree fed or kept the wrong tokens")
    return None


def test_blocks_conserved_across_tree_rounds():
    answers = check(cases_blocks_conserved_across_tree_rounds(), "request")
    rejected = sum(a["rejected"] for a in answers)
    assert rejected >= 1000, (f"over 150 requests SpecStats counts only {rejected} rejected tree nodes "
                              "(drafted - accepted); the reference rejects over 1000 on the same requests")


# --- 2.5 Generation ---------------------------------------------------------------------------------

GEN_PROMPTS = [[1, 2, 3, 4, 5, 6], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], [7, 7, 2, 7, 7, 2, 7, 7, 2]]
LOOP_RULE = ("card 2.5: feed the prompt but its last token, then one tree of at most max_new - len(emitted so far) "
             "- 1 nodes per round; keep_path(start, path[:e]) with e the tokens handed over in this round")
CYCLE = [1, 2, 3, 4, 5, 0, 0, 0]
CYCLE_PROMPT = [0, 1, 2, 3, 4, 5, 0, 1]


DRAFTERS = {
    "PromptLookupDrafter(4)": lambda vocab: PromptLookupDrafter(4),
    "SuffixTreeDrafter(8, 4)": lambda vocab: SuffixTreeDrafter(8, 4),
    "ModelDrafter(draft_model(vocab), k=4, branch=2)": lambda vocab: ModelDrafter(draft_model(vocab), GREEDY, 4, 0, 2),
}


def tree_generation(target, drafter, prompt, params, seed, max_new, eos):
    g = generate_tree(target, drafter, prompt, params, seed, max_new, eos)
    return {"tokens": [int(t) for t in g.tokens], "logprobs": [float(x) for x in g.logprobs],
            "drafted": g.stats.drafted, "accepted": g.stats.accepted, "target_calls": g.stats.target_calls,
            "cached": target.cached(), "max_slot": target.max_slot, "passes": target.calls}


DRAWN_GREEDY = 2  # requests greedy_tree_equals_plain_greedy draws when graded, each under every drafter


def drawn_greedy_run(draws) -> tuple:
    """A request on a TreeTableTarget(12) of a drawn seed: text the target writes itself (its drafts
    mostly kept) or text at random, greedy or with the penalties the fixed runs use."""
    seed = draws.randrange(10_000)
    prompt, writer, length = [draws.randrange(12)], TreeTableTarget(12, seed), draws.randint(3, 14)
    while len(prompt) < length:
        prompt.append(int(np.argmax(writer._logits_at(prompt))) if draws.random() < 0.7 else draws.randrange(12))
    prm = draws.choice([GREEDY, SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2)])
    return (TreeTableTarget, (12, seed), f"TreeTableTarget(12, {seed})", prompt, prm, draws.randint(8, 30),
            " (drawn when graded)")


def cases_greedy_tree_equals_plain_greedy():
    cases = []
    runs = [(TreeTableTarget, (12, 1), "TreeTableTarget(12, 1)", p, GREEDY, 30, "") for p in GEN_PROMPTS]
    runs += [(TreeTableTarget, (12, 5), "TreeTableTarget(12, 5)", p,
              SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2), 25, "") for p in GEN_PROMPTS]
    runs += [(TreeCycleTarget, (CYCLE,), "TreeCycleTarget(CYCLE)", CYCLE_PROMPT, GREEDY, 30, "")]
    draws = drawn("greedy_tree_equals_plain_greedy")
    runs += [drawn_greedy_run(draws) for _ in range(DRAWN_GREEDY if draws is not None else 0)]
    for make, args, name, prompt, prm, max_new, drawn_label in runs:
        vocab = make(*args).vocab
        want = plain_greedy(make(*args), prompt, prm, max_new)
        budget = len(prompt) + max_new - 1
        for label, drafter in DRAFTERS.items():
            def judge(got, _expected, want=want, budget=budget, cyclic=make is TreeCycleTarget, label=label):
                if not isinstance(got, dict) or "tokens" not in got:
                    return "not a generation"
                if got["tokens"] != want:
                    return f"trees changed the greedy tokens: plain greedy gives {want}"
                if got["cached"] != budget:
                    return f"the target caches {got['cached']} positions after generation; it must keep {budget}"
                if got["max_slot"] >= budget:
                    return f"KV written at slot {got['max_slot']}, past the request's budget {budget}"
                if cyclic and not label.startswith("Model") and got["passes"] > 12:  # counted by the target
                    return f"{got['passes']} target passes on repeating text: the tree saved almost none"
                return None

            text = (f"target = {name}; generate_tree(target, {label}, {prompt}, {params_text(prm)}, 0, {max_new}, [])"
                    "   # course/tests/tree_fakes.py (ol shell has it)")
            cases.append(Case(f"{label.replace('(vocab)', f'({vocab})')} on {name} prompt {prompt}"
                              f"{' with penalties' if prm is not GREEDY else ''}{drawn_label}",
                              text.replace("(vocab)", f"({vocab})"), lambda m=make, a=args, d=drafter, p=prompt, r=prm, n=max_new,
                              v=vocab: tree_generation(m(*a), d(v), p, r, 0, n, []),
                              {"tokens": want, "cached": budget}, LOOP_RULE + "; greedy output never changes",
                              judge=judge))
    return cases


def test_greedy_tree_equals_plain_greedy():
    check(cases_greedy_tree_equals_plain_greedy())


def generation_case(c: dict) -> Case:
    """A request in the fixture's form (a recorded one or a drawn one) and the answer it expects."""
    d = c["drafter"]
    make = (lambda: PromptLookupDrafter(d["k"])) if d["kind"] == "prompt_lookup" else \
        (lambda: SuffixTreeDrafter(d["k"], d["width"]))
    drafter_text = f"PromptLookupDrafter({d['k']})" if d["kind"] == "prompt_lookup" else \
        f"SuffixTreeDrafter({d['k']}, {d['width']})"
    t = c["target"]
    params = SamplingParams(**c["params"])
    text = (f"target = TreeTableTarget({t['vocab']}, {t['seed']}, order={t['order']}, scale={t['scale']}); "
            f"g = generate_tree(target, {drafter_text}, {c['prompt']}, {params_text(params)}, {c['seed']}, "
            f"{c['max_new']}, {c['eos']}); (g.tokens, g.logprobs, g.stats, target.cached())")
    return Case(c["name"], text,
                lambda: {k: v for k, v in tree_generation(TreeTableTarget(**t), make(), c["prompt"], params, c["seed"],
                                                          c["max_new"], c["eos"]).items() if k not in ("max_slot", "passes")},
                c["expect"], LOOP_RULE + "; one generator stream(seed) for the request; SpecStats as L10.8's")


def drawn_generation(draws, i: int) -> dict:
    """A whole request on the tree fake, drawn as the fixture's oracle draws the recorded ones (their
    sampling settings), run by the reference in the judge: its drafter, its generate_tree, and a
    target that compacts with its compact."""
    spec = {"vocab": 6, "seed": draws.randrange(1000), "order": draws.randint(1, 2), "scale": 3.0}
    period = [draws.randrange(6) for _ in range(draws.randint(2, 4))]
    prompt = (period * 6)[:draws.randint(3, 15)]
    drafter = {"kind": "prompt_lookup", "k": draws.randint(1, 6)} if i % 3 == 0 else \
        {"kind": "suffix_tree", "k": draws.randint(1, 10), "width": draws.randint(1, 4)}
    params = draws.choice([c["params"] for c in golden("generate")])
    eos = [draws.randrange(6)] if i % 5 == 4 else []
    # max_new from 1, where the oracle's start at 0: a request that emits nothing is no test of a table.
    seed, max_new = draws.getrandbits(64), draws.randint(1, 24)
    trees, sampling = reference("trees"), reference("sampling")
    drafts = trees.PromptLookupDrafter(drafter["k"]) if drafter["kind"] == "prompt_lookup" else \
        trees.SuffixTreeDrafter(drafter["k"], drafter["width"])
    target = TreeTableTarget(**spec, compact=trees.compact)
    g = trees.generate_tree(target, drafts, prompt, sampling.SamplingParams(**params), seed, max_new, eos)
    return {"name": f"drawn-{i} (drawn when graded)", "target": spec, "prompt": prompt, "drafter": drafter,
            "params": params, "seed": seed, "max_new": max_new, "eos": eos,
            "expect": {"tokens": [int(t) for t in g.tokens], "logprobs": [float(x) for x in g.logprobs],
                       "drafted": g.stats.drafted, "accepted": g.stats.accepted,
                       "target_calls": g.stats.target_calls, "cached": target.cached()}}


def cases_tree_generation_matches_recorded():
    draws = drawn("tree_generation_matches_recorded")
    drawn_requests = [drawn_generation(draws, i) for i in range(DRAWN_CASES if draws is not None else 0)]
    return [generation_case(c) for c in golden("generate") + drawn_requests]


def test_tree_generation_matches_recorded():
    check(cases_tree_generation_matches_recorded(), "recorded generation")


def cases_generate_tree_streams_and_stops_when_told():
    rule = ("card 2.5: every emitted token and logprob reaches on_token in order; a false answer or an EOS ends "
            "generation at once, mid-round, and the target keeps the root and the emitted tokens but the last")

    def streamed(prm):
        heard = []
        g = generate_tree(TreeTableTarget(12, 3), SuffixTreeDrafter(6, 3), GEN_PROMPTS[2], prm, 99, 25, [],
                          lambda t, lp: heard.append([int(t), float(lp)]) is None)
        quiet = generate_tree(TreeTableTarget(12, 3), SuffixTreeDrafter(6, 3), GEN_PROMPTS[2], prm, 99, 25, [])
        return {"heard": heard, "returned": [[int(t), float(lp)] for t, lp in zip(g.tokens, g.logprobs)],
                "no listener gives the same tokens": [int(t) for t in quiet.tokens] == [int(t) for t in g.tokens]}

    judge = judge_stream("generate_tree", "no listener gives the same tokens", "on_token=None gives other tokens")

    def stopped(stop_after, eos):
        heard = []
        target = TreeCycleTarget(CYCLE)
        g = generate_tree(target, SuffixTreeDrafter(8, 2), CYCLE_PROMPT, GREEDY, 0, 20, eos,
                          lambda t, lp: heard.append(int(t)) or len(heard) < stop_after)
        return {"tokens": [int(t) for t in g.tokens], "heard": heard, "target_calls": g.stats.target_calls,
                "cached": target.cached(), "cache": target._cached_ids()}

    def silent():
        heard = []
        g = generate_tree(TreeCycleTarget(CYCLE), SuffixTreeDrafter(8, 2), CYCLE_PROMPT, GREEDY, 0, 20, [],
                          lambda t, lp: heard.append(int(t)))
        return {"tokens": [int(t) for t in g.tokens], "heard": heard}

    cases = [Case(f"every token heard at {params_text(prm)}",
                  f"heard = []; generate_tree(TreeTableTarget(12, 3), SuffixTreeDrafter(6, 3), {GEN_PROMPTS[2]}, "
                  f"{params_text(prm)}, 99, 25, [], lambda t, lp: heard.append((t, lp)) is None)",
                  lambda prm=prm: streamed(prm), {"heard": "every token, in order"}, rule, judge=judge)
             for prm in (GREEDY, SamplingParams(temperature=0.9, top_k=5))]
    prefix = "heard = []; target = TreeCycleTarget(CYCLE); generate_tree(target, SuffixTreeDrafter(8, 2), "
    cases.append(Case("a listener that says stop at the third token, inside the first tree",
                      prefix + f"{CYCLE_PROMPT}, SamplingParams(), 0, 20, [], lambda t, lp: heard.append(t) or "
                      "len(heard) < 3)", lambda: stopped(3, []),
                      {"tokens": [2, 3, 4], "heard": [2, 3, 4], "target_calls": 2, "cached": len(CYCLE_PROMPT) + 2,
                       "cache": CYCLE_PROMPT + [2, 3]}, rule))
    cases.append(Case("an EOS inside an accepted path", prefix + f"{CYCLE_PROMPT}, SamplingParams(), 0, 20, [4], "
                      "lambda t, lp: heard.append(t) or True)", lambda: stopped(99, [4]),
                      {"tokens": [2, 3, 4], "heard": [2, 3, 4], "target_calls": 2, "cached": len(CYCLE_PROMPT) + 2,
                       "cache": CYCLE_PROMPT + [2, 3]}, rule))
    cases.append(Case("a listener that answers None stops after the first token",
                      prefix + f"{CYCLE_PROMPT}, SamplingParams(), 0, 20, [], lambda t, lp: heard.append(t))",
                      lambda: silent(), {"tokens": [2], "heard": [2]}, rule))
    draws = drawn("generate_tree_streams_and_stops_when_told")
    for i in range(DRAWN_RULE_CASES if draws is not None else 0):
        req, stop_at = drawn_tree_cycle_request(draws), draws.randint(1, 6)
        drafter = (f"SuffixTreeDrafter({req['k']}, {req['width']})" if req["width"] else
                   f"PromptLookupDrafter({req['k']})")
        cases.append(Case(f"drawn-{i}: {drafter}, max_new {req['max_new']}, eos {req['eos']}, stop at token "
                          f"{stop_at} (drawn when graded)",
                          f"heard = []; target = TreeCycleTarget({req['succ']}); generate_tree(target, {drafter}, "
                          f"{req['prompt']}, SamplingParams(), 0, {req['max_new']}, {req['eos']}, "
                          f"lambda t, lp: heard.append(t) or len(heard) < {stop_at})",
                          lambda r=req, n=stop_at: tree_cycle_run(r, n, own_tree_loop()),
                          tree_cycle_run(req, stop_at, reference_tree_loop()), rule))
    cases.append(Case("max_new = 0 feeds nothing", "generate_tree(TreeCycleTarget(CYCLE), SuffixTreeDrafter(8, 2), "
                      f"{CYCLE_PROMPT}, SamplingParams(), 0, 0, [])",
                      lambda: {k: v for k, v in tree_generation(TreeCycleTarget(CYCLE), SuffixTreeDrafter(8, 2),
                                                                CYCLE_PROMPT, GREEDY, 0, 0, []).items()
                               if k in ("tokens", "target_calls", "cached")},
                      {"tokens": [], "target_calls": 0, "cached": 0}, rule))
    bad_rule = ("card 2.5: before anything is fed (max_new = 0 too), TreeError for an empty prompt, a max_new that is not an int >= 0 "
                "(a bool too) and a target that already caches positions; in a round, TreeError for a tree not "
                "rooted at the pending token or with more nodes below the root than max_new - emitted - 1, before "
                "the tree is fed")
    fresh = ("TreeCycleTarget(CYCLE)", lambda: TreeCycleTarget(CYCLE))
    suffix8 = ("SuffixTreeDrafter(8, 2)", lambda: SuffixTreeDrafter(8, 2))
    bad = [("an empty prompt", fresh, suffix8, [], 4),
           ("an empty prompt, max_new = 0", fresh, suffix8, [], 0),
           ("max_new = 2.5", fresh, suffix8, CYCLE_PROMPT, 2.5),
           ("max_new = -1", fresh, suffix8, CYCLE_PROMPT, -1),
           ("max_new = True", fresh, suffix8, CYCLE_PROMPT, True),
           ("a target already caching positions", ("started_cycle_target()", started_cycle_target), suffix8,
            CYCLE_PROMPT, 4),
           ("a tree rooted elsewhere", fresh,
            ("FixedDrafter([9, 2], [-1, 0])", lambda: FixedDrafter([9, 2], [-1, 0])), CYCLE_PROMPT, 4),
           ("a tree past the budget", fresh,
            ("FixedDrafter(None, [-1, 0, 1, 2, 3])", lambda: FixedDrafter(None, [-1, 0, 1, 2, 3])), CYCLE_PROMPT, 4)]
    for what, (target, make_target), (drafter, make_drafter), prompt, max_new in bad:
        cases.append(Case(f"refused: {what}", f"generate_tree({target}, {drafter}, {prompt}, SamplingParams(), 0, "
                          f"{max_new}, [])   # {target.split('(')[0]}, {drafter.split('(')[0]}: course/tests/test_l10_9.py",
                          lambda a=(make_target, make_drafter, prompt, max_new): refused_tree_request(*a),
                          raises("TreeError"), bad_rule))
    return cases


def own_tree_loop():
    """L10.9's loop, drafters and compaction of the code under test, and greedy settings."""
    return generate_tree, SuffixTreeDrafter, PromptLookupDrafter, compact, GREEDY


def reference_tree_loop():
    """The same of the reference, whose answers a drawn case expects."""
    trees = reference("trees")
    return (trees.generate_tree, trees.SuffixTreeDrafter, trees.PromptLookupDrafter, trees.compact,
            reference("sampling").SamplingParams())


def drawn_tree_cycle_request(draws) -> dict:
    """A greedy request on a TreeCycleTarget of a drawn successor map (L10.8's :func:`drawn_cycle`),
    a suffix-tree drafter (``width``) or prompt lookup (``width`` 0), max_new and EOS ids drawn."""
    succ, prompt = drawn_cycle(draws)
    return {"succ": succ, "prompt": prompt, "k": draws.randint(1, 8), "width": draws.choice([0, 1, 2, 3]),
            "max_new": draws.randint(0, 16), "eos": draws.sample(range(len(succ)), draws.randint(0, 2))}


def tree_cycle_run(req: dict, stop_at: int, loop) -> dict:
    """``req`` run by ``loop`` (generate_tree, the two drafters, compact, greedy settings) on a fresh
    TreeCycleTarget that compacts with the loop's compact, with a listener that says stop at its
    ``stop_at``-th token: how the request ended and what was heard; what the drafts found (passes,
    stats) is the drafters' tests' business."""
    generate, suffix_drafter, lookup_drafter, squash, greedy = loop
    target, heard = TreeCycleTarget(req["succ"], compact=squash), []
    drafter = suffix_drafter(req["k"], req["width"]) if req["width"] else lookup_drafter(req["k"])
    g = generate(target, drafter, req["prompt"], greedy, 0, req["max_new"], req["eos"],
                 lambda t, lp: heard.append(int(t)) or len(heard) < stop_at)
    return {"tokens": [int(t) for t in g.tokens], "logprobs": len(g.logprobs), "heard": heard,
            "cached": target.cached(), "cache": target._cached_ids()}


class FixedDrafter:
    """A drafter that always proposes one tree: ``tokens`` (None: the pending token, then 1, 2, ...) under ``parents``."""

    def __init__(self, tokens, parents):
        self.tokens, self.parents = tokens, parents

    def propose(self, ctx, pending, k) -> DraftTree:
        tokens = self.tokens or [int(pending)] + [1 + i for i in range(len(self.parents) - 1)]
        return DraftTree(list(tokens), list(self.parents))


def started_cycle_target() -> TreeCycleTarget:
    target = TreeCycleTarget(CYCLE)
    target.extend([0, 1])
    return target


def refused_tree_request(make_target, make_drafter, prompt, max_new):
    """A bad request's or a bad tree's generate_tree call; it must raise TreeError before the tree is fed
    (a fresh target holds at most the prompt but its last token, the pending root)."""
    target = make_target()
    held = target.cached()
    try:
        return generate_tree(target, make_drafter(), prompt, GREEDY, 0, max_new, [])
    finally:
        fed = target.cached() - held
        assert fed <= max(len(prompt) - 1, 0), f"the target was fed {fed} positions before the request was refused"


def test_generate_tree_streams_and_stops_when_told():
    check(cases_generate_tree_streams_and_stops_when_told())


# --- The real model ---------------------------------------------------------------------------------

def tiny_llama_tree():
    """A tree fed to the tiny llama after a cached prompt: each row bitwise against a fresh chain run,
    then keep_path through your compact, then the next token against a fresh run of the kept text."""
    model = TinyLlama.random(LlamaConfig(), 0)
    pool = model.new_pool(64, 4)
    prompt = np.random.default_rng(5).integers(0, 256, size=7).tolist()
    tokens, parents = [prompt[-1], 40, 41, 50, 51, 60], [-1, 0, 0, 1, 1, 2]

    def fresh_last_row(text):
        t = RunnerTarget(model, pool)
        row = t.extend(text)[-1]
        t.release()
        return row

    target = RunnerTarget(model, pool)
    target.extend(prompt[:-1])
    start = target.cached()
    rows = target.extend_tree(tokens, tree_positions(start, parents), tree_mask(parents))
    paths = {j: [i for i in range(j + 1) if tree_mask(parents)[j][i]] for j in range(len(tokens))}
    same = [bool(np.array_equal(rows[j], fresh_last_row(prompt[:-1] + [tokens[i] for i in paths[j]])))
            for j in range(len(tokens))]
    target.keep_path(start, [0, 2, 5])
    kept = prompt + [41, 60]
    cached = target.cached()
    after = target.extend([7])[0]
    seen = {"rows equal fresh chain runs": same, "cached": cached,
            "next row after keep_path equals a fresh run": bool(np.array_equal(after, fresh_last_row(kept + [7])))}
    target.release()
    seen["blocks back in the pool"] = pool.num_free() == 64
    return seen


def tiny_llama_tree_generation():
    model = TinyLlama.random(LlamaConfig(), 0)
    pool = model.new_pool(64, 4)
    prompt = np.random.default_rng(5).integers(0, 256, size=7).tolist()
    periodic = (prompt[:4] * 3)[:10]
    plain = RunnerTarget(model, pool)
    want = plain_greedy(plain, periodic, GREEDY, 12)
    plain.release()
    target = RunnerTarget(model, pool)
    g = generate_tree(target, SuffixTreeDrafter(6, 3), periodic, GREEDY, 0, 12, [])
    seen = {"same tokens as plain greedy": [int(t) for t in g.tokens] == want, "cached": target.cached(),
            "drafted": g.stats.drafted > 0}
    target.release()
    seen["blocks back in the pool"] = pool.num_free() == 64
    return seen


def cases_runner_target_scores_a_tree():
    rule = ("card 2.6 and 2.4: RunnerTarget.extend_tree scores each node as a fresh run of its path; keep_path calls "
            "your compact; greedy with trees emits plain greedy's tokens")
    return [
        Case("a tree after a cached prompt, then keep_path", "tiny_llama_tree()   # helper of "
             "course/tests/test_l10_9.py (ol shell has it)", tiny_llama_tree,
             {"rows equal fresh chain runs": [True] * 6, "cached": 9,
              "next row after keep_path equals a fresh run": True, "blocks back in the pool": True}, rule),
        Case("greedy trees on the tiny llama", "tiny_llama_tree_generation()   # helper of course/tests/test_l10_9.py",
             tiny_llama_tree_generation, {"same tokens as plain greedy": True, "cached": 21, "drafted": True,
                                          "blocks back in the pool": True}, rule),
    ]


def test_runner_target_scores_a_tree():
    check(cases_runner_target_scores_a_tree())
