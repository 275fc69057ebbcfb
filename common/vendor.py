"""`make vendor`: refresh the front-end files under static/vendor/ and their compressed twins.

    python -m common.vendor

Run by hand after upgrading django-htmx or plotly.js, never at run time (the site loads
nothing from the network). htmx comes from the installed django-htmx; plotly.js's *basic*
bundle (scatter, bar, pie: every trace type our charts draw, a quarter of the full bundle's
size) from npm, checked against the integrity hash npm publishes for that version. Each file
gets `.gz` and `.br` siblings: WhiteNoise serves those to browsers that accept them, also in
development where it reads static/ through the finders (no collectstatic).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import shutil
import tarfile
import urllib.request
from pathlib import Path

import brotli
import django_htmx

VENDOR = Path(__file__).resolve().parent.parent / "static" / "vendor"
PLOTLY_VERSION = "4.1.1"
PLOTLY_TARBALL = (
    "https://registry.npmjs.org/plotly.js-basic-dist-min/-/"
    f"plotly.js-basic-dist-min-{PLOTLY_VERSION}.tgz"
)
PLOTLY_SHA512 = (
    "1oNF8PeQx2hv/y7tqEVWKD3JGwn/MGEMQ8mL9HUwsaqG9FGy/OU5FHUHvzqbqxN4mnwZGI9abTiE775C4kkjMQ=="
)
HTMX = Path(django_htmx.__file__).parent / "static" / "django_htmx"


def plotly_basic() -> bytes:
    with urllib.request.urlopen(PLOTLY_TARBALL, timeout=60) as response:
        tarball = response.read()
    digest = base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    if digest != PLOTLY_SHA512:
        raise SystemExit(f"{PLOTLY_TARBALL}: sha512 {digest} is not the published one")
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        return tar.extractfile("package/plotly-basic.min.js").read()


def compress(path: Path) -> None:
    data = path.read_bytes()
    path.with_name(path.name + ".gz").write_bytes(gzip.compress(data, 9, mtime=0))
    path.with_name(path.name + ".br").write_bytes(brotli.compress(data, quality=11))


def main() -> None:
    shutil.copyfile(HTMX / "htmx-2.min.js", VENDOR / "htmx.min.js")
    shutil.copyfile(HTMX / "ext" / "hx-sse-2.min.js", VENDOR / "htmx-ext-sse.min.js")
    (VENDOR / "plotly-basic.min.js").write_bytes(plotly_basic())
    for path in sorted(VENDOR.glob("*.js")):
        compress(path)
        sizes = [
            f"{p.suffix or '.js'} {p.stat().st_size / 1024:,.0f} KiB"
            for p in (path, path.with_name(path.name + ".gz"), path.with_name(path.name + ".br"))
        ]
        print(f"{path.name}: " + ", ".join(sizes))


if __name__ == "__main__":
    main()
