"""Notebook support shared by result objects: optional pandas, and Jupyter display."""

from __future__ import annotations

from ..errors import NotSupportedError

NOTEBOOK_WIDTH = 100


def require_pandas(what: str = "to_dataframe()"):
    """The pandas module, or NotSupportedError saying how to install it."""
    try:
        import pandas
    except ImportError:
        raise NotSupportedError("pandas", f"{what} needs pandas, which is not installed",
                                hint="pip install ebpfkit[notebook]") from None
    return pandas


def render_text(renderable, width: int = NOTEBOOK_WIDTH) -> str:
    """Plain text of a rich renderable, without colors."""
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False,
                      force_jupyter=False, highlight=False)
    console.print(renderable)
    return console.file.getvalue().rstrip("\n")


def mimebundle(renderable, width: int = NOTEBOOK_WIDTH) -> dict:
    """IPython display data: styled HTML like rich's Jupyter output, plus plain text."""
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), record=True, width=width, force_jupyter=False,
                      force_terminal=True, color_system="truecolor", highlight=False)
    console.print(renderable)
    html = console.export_html(
        inline_styles=True,
        code_format='<pre style="white-space:pre;overflow-x:auto;line-height:normal;'
                    "font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace\">"
                    "{code}</pre>")
    return {"text/plain": render_text(renderable, width), "text/html": html}
