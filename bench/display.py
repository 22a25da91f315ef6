"""What the benchmarks' printed tables and saved figures share."""

import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path


def print_table(head: str, lines: Iterable[str]) -> None:
    """A header, a rule as wide as it, then one line a row."""
    print(head)
    print("-" * len(head))
    for line in lines:
        print(line)


def out_folder(path: Path) -> None:
    """Make ``path`` with its parents and write to it once, before the run: a run's figures are
    written at its end, and a folder that cannot take them would lose minutes of measurement (the
    full SmolLM2 load run takes 40). One that cannot stops the run at once, with its name."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        print(f"error: --out {path}: cannot write there ({err.strerror or err})", file=sys.stderr)
        raise SystemExit(2) from None


def finish_figure(fig, path: Path, *legends) -> None:
    """Small legends on ``legends``, a tight layout, ``path`` written at 110 dpi, the figure closed."""
    import matplotlib.pyplot as plt

    for ax in legends:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def blas(model) -> dict:
    """The BLAS kernels this process times with, and how ``model`` lays its rows out under them.

    Figures from runs whose OpenBLAS ran other kernels do not compare: on an AVX-512 machine that
    sets ``OPENBLAS_CORETYPE=Haswell`` (some machines of this project's kind do, for older builds'
    sake) OpenBLAS has no direct kernel for the engine's small gemms, the model feeds every row at its
    slot of 16-row gemms, and a pass costs more (bench/load_notebook.md, "The kernel a run times with")."""
    from threadpoolctl import threadpool_info

    found = [f"{i['internal_api']} {i['version']} {i.get('architecture') or 'unknown'}"
             for i in threadpool_info() if i["user_api"] == "blas"]
    return {"blas": ", ".join(found) or "none found", "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "rows_alone": bool(model.rows_alone)}


def blas_text(info: dict) -> str:
    """One line for :func:`blas`'s answer."""
    forced = info["OPENBLAS_CORETYPE"]
    return (f"BLAS: {info['blas']}" + (f" (OPENBLAS_CORETYPE={forced} set in the environment)" if forced else "")
            + "; weight matmuls " + ("over the fed rows alone" if info["rows_alone"]
                                     else "in 16-row slots, every row at slot p % 16"))
