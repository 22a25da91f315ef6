"""What the benchmarks' printed tables and saved figures share."""

from collections.abc import Iterable
from pathlib import Path


def print_table(head: str, lines: Iterable[str]) -> None:
    """A header, a rule as wide as it, then one line a row."""
    print(head)
    print("-" * len(head))
    for line in lines:
        print(line)


def finish_figure(fig, path: Path, *legends) -> None:
    """Small legends on ``legends``, a tight layout, ``path`` written at 110 dpi, the figure closed."""
    import matplotlib.pyplot as plt

    for ax in legends:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
