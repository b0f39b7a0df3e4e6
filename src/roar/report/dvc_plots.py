"""``dvc plots`` pages that work offline.

DVC's HTML page loads vega, vega-lite and vega-embed from a CDN, so on a machine without internet
(a cluster node, these machines) it stays blank. :func:`write_offline_template` writes an HTML
template for ``dvc plots show/diff --html-template`` (or the ``plots.html_template`` setting) with
the same three libraries, at the versions DVC's own page names, inlined from their npm packages.
Its pages render with the SVG renderer, so labels and legends are text a reader can select.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from roar.core.errors import RoarError
from roar.core.fileio import write_text_atomic
from roar.core.tools import tool_env

TEMPLATE = Path(".dvc/plots/offline.html")  # git-ignored; built per machine
CONFIG_VALUE = "plots/offline.html"  # ``plots.html_template`` is relative to the .dvc folder
CACHE = Path(".dvc/tmp/vega")  # the npm tarballs

PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>DVC Plot</title>
{libraries}
    <script type="text/javascript">
        // The SVG renderer: legends and axes become text (selectable, searchable); charts stay vector.
        const roarEmbed = vegaEmbed;
        vegaEmbed = (element, spec, options) => roarEmbed(element, spec, {{renderer: "svg", ...(options || {{}})}});
    </script>
    <style>
        table {{ border-spacing: 15px; }}
    </style>
</head>
<body>
    {{plot_divs}}
</body>
</html>
"""


def vega_libraries() -> list[tuple[str, str]]:
    """``(npm package, version)`` of the scripts DVC's own plots page loads (vega, vega-lite, vega-embed)."""
    from dvc_render.vega import VegaRenderer

    found = re.findall(r"/npm/([a-z-]+)@([0-9][0-9.]*)", VegaRenderer.SCRIPTS)
    if {name for name, _ in found} != {"vega", "vega-lite", "vega-embed"}:
        raise RoarError(f"could not read the vega library versions from dvc_render's page: {found}")
    return found


def _npm_pack(package: str, version: str, cache: Path) -> Path:
    """The npm tarball of ``package@version`` (``npm pack`` into ``cache`` unless already there)."""
    tarball = cache / f"{package}-{version}.tgz"
    if tarball.is_file():
        return tarball
    npm = shutil.which("npm")
    if npm is None:
        raise RoarError("npm not found; the offline plots page inlines vega from its npm packages: install npm "
                        "(Debian: apt-get install npm) or use `dvc plots show` online")
    cache.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([npm, "pack", "--silent", f"{package}@{version}", "--pack-destination", str(cache)],
                          capture_output=True, text=True)
    if proc.returncode != 0 or not tarball.is_file():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RoarError(f"`npm pack {package}@{version}` failed (exit {proc.returncode}): {last}")
    return tarball


def _minified(tarball: Path, package: str) -> str:
    member = f"package/build/{package}.min.js"
    with tarfile.open(tarball) as archive:
        try:
            script = archive.extractfile(member).read().decode("utf-8")
        except KeyError:
            raise RoarError(f"{tarball} has no {member}; remove it and run again") from None
    return script


def offline_page(scripts: list[tuple[str, str, str]]) -> str:
    """The HTML template text with ``(package, version, javascript)`` inlined, in order."""
    # an inline script ends at the first "</script", wherever it is: escape it inside the code
    escaped = [(name, version, code.replace("</script", "<\\/script")) for name, version, code in scripts]
    libraries = "\n".join(f'    <script type="text/javascript">/* {name}@{version} */\n{code}\n    </script>'
                          for name, version, code in escaped)
    return PAGE.format(libraries=libraries, refresh_tag="{refresh_tag}")


def write_offline_template(root: Path = Path("."), configure: bool = True) -> Path:
    """Write ``.dvc/plots/offline.html`` of the DVC project ``root`` and, with ``configure``, set it as this
    workspace's ``plots.html_template`` (``.dvc/config.local``), so that a plain ``dvc plots show`` or
    ``dvc plots diff`` page renders offline. Returns the template's path."""
    from roar.config.layout import project_root

    root = project_root(root)
    scripts = [(name, version, _minified(_npm_pack(name, version, root / CACHE), name))
               for name, version in vega_libraries()]
    path = root / TEMPLATE
    write_text_atomic(path, offline_page(scripts))
    if configure:
        subprocess.run(["dvc", "config", "--local", "plots.html_template", CONFIG_VALUE], cwd=root, env=tool_env(),
                       check=True, capture_output=True)
    return path
