"""The JavaScript that :mod:`course_utils.attention_view` inlines, fetched once from npm and checked on disk.

bertviz's views load require.js, d3 and jQuery from a CDN, which a workshop room without internet cannot
reach. This script fetches the same libraries from the npm registry, checks each tarball against the
registry's ``dist.integrity`` (sha512), and writes the one file the views need and the package's licence to
``course_utils/static/vendor/``, with ``SOURCES.json`` recording where each came from and its sha256.

    python -m course_tools.vendor_js            # fetch again, verify, write the files and SOURCES.json
    python -m course_tools.vendor_js --check    # offline: do the files on disk match SOURCES.json?
    python -m course_tools.vendor_js --site [--check]   # the same for the static site's KaTeX and MiniSearch

The static site of ``course_tools.site`` renders the notebooks' math with KaTeX and searches its pages with
MiniSearch, each a :class:`Bundle` (files of one package) with a SOURCES.json of its own (the tarball's
sha512 from the registry, each file's sha256, the licence): :data:`KATEX` in ``course_tools/static/katex/``,
only what the pages use (the minified script and stylesheet, auto-render, the woff2 fonts);
:data:`MINISEARCH` in ``course_tools/static/minisearch/``, its browser build (UMD, ``dist/umd/index.js``).

jQuery 2.0.0, the version bertviz asks the CDN for, was never published to npm; 2.2.4 is the last of the 2.x
line and does what bertviz needs of it (selections, ``.val()``, ``.on('change')``).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import course_utils
from course_utils._files import sha256_bytes

__all__ = [
    "VENDOR_DIR",
    "Package",
    "PACKAGES",
    "check",
    "fetch",
    "main",
    "KATEX_DIR",
    "Bundle",
    "KATEX",
    "fetch_bundle",
    "check_bundle",
    "MINISEARCH",
    "SITE_BUNDLES",
]

# bertviz's libraries live in the learner's package, beside attention_view, which inlines them; the site's
# KaTeX lives here (KATEX_DIR below)
VENDOR_DIR = Path(course_utils.__file__).resolve().parent / "static" / "vendor"
REGISTRY = "https://registry.npmjs.org"


@dataclass(frozen=True)
class Package:
    """One npm package: the file the views inline and the licence that comes with it."""

    name: str
    version: str
    path: str  # the file inside the tarball (below its top folder ``package/``)
    vendored_as: str  # its name in VENDOR_DIR
    license_path: str | None  # None: the package ships no licence file (see _MIT)
    license_as: str

    @property
    def tarball_url(self) -> str:
        return f"{REGISTRY}/{self.name}/-/{self.name}-{self.version}.tgz"


PACKAGES = (
    Package("requirejs", "2.3.6", "require.js", "require.js", None, "LICENSE.requirejs"),
    Package("d3", "5.7.0", "dist/d3.min.js", "d3.min.js", "LICENSE", "LICENSE.d3"),
    Package("jquery", "2.2.4", "dist/jquery.min.js", "jquery.min.js", "LICENSE.txt", "LICENSE.jquery"),
)


# The requirejs tarball has no licence file: its package.json says "MIT" and require.js opens with a
# @license comment naming the copyright holders. The licence file written for it is that comment followed by
# the MIT licence's text.
_MIT = """
Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated
documentation files (the "Software"), to deal in the Software without restriction, including without
limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the
Software, and to permit persons to whom the Software is furnished to do so, subject to the following
conditions:

The above copyright notice and this permission notice shall be included in all copies or substantial
portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT
LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO
EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN
AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE
OR OTHER DEALINGS IN THE SOFTWARE.
"""


def _licence_from_header(body: bytes, package_json: bytes, what: str) -> bytes:
    """The leading ``@license`` comment of ``body`` and the MIT text, for a package that ships no licence."""
    declared = json.loads(package_json).get("license")
    text = body.decode("utf-8")
    if declared != "MIT" or not text.startswith("/**") or "@license" not in text[: text.index("*/")]:
        raise ValueError(
            f"{what}: expected an MIT package whose file opens with a @license comment, got license {declared!r}"
        )
    header = text[: text.index("*/") + 2]
    return (
        f'{what}: no licence file in the npm tarball; package.json says "MIT".\n'
        f"The header of the file:\n\n{header}\n\nThe MIT License\n{_MIT}"
    ).encode()


def _get(url: str, timeout: float = 60.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _verify_integrity(data: bytes, integrity: str, what: str) -> None:
    """Raise ValueError unless ``data`` matches an npm ``dist.integrity`` string (``sha512-<base64>``)."""
    algo, _, digest = integrity.partition("-")
    if algo != "sha512":
        raise ValueError(f"{what}: expected a sha512 integrity from the registry, got {integrity!r}")
    actual = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if actual != digest:
        raise ValueError(f"{what}: tarball sha512 is {actual}, the registry says {digest}")


def _tarball(name: str, version: str, expected_url: str) -> tuple[bytes, dict]:
    """The npm tarball of ``name@version`` and the registry's ``dist`` record, after checking that the registry
    names ``expected_url`` and that the tarball matches its integrity."""
    what = f"{name}@{version}"
    dist = json.loads(_get(f"{REGISTRY}/{name}/{version}"))["dist"]
    if dist["tarball"] != expected_url:
        raise ValueError(f"{what}: the registry names tarball {dist['tarball']}, expected {expected_url}")
    tgz = _get(dist["tarball"])
    _verify_integrity(tgz, dist["integrity"], what)
    return tgz, dist


def _member(tar: tarfile.TarFile, path: str, what: str) -> bytes:
    try:
        f = tar.extractfile(f"package/{path}")
    except KeyError:
        f = None
    if f is None:
        raise ValueError(f"{what}: the tarball has no file package/{path}")
    return f.read()


def fetch(vendor_dir: Path = VENDOR_DIR) -> list[dict]:
    """Download every package in :data:`PACKAGES`, verify it, write its files and SOURCES.json.

    Returns the records written to SOURCES.json. Needs the npm registry; nothing is written unless every
    tarball matched its integrity.
    """
    records, files = [], {}
    for pkg in PACKAGES:
        what = f"{pkg.name}@{pkg.version}"
        tgz, dist = _tarball(pkg.name, pkg.version, pkg.tarball_url)
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
            body = _member(tar, pkg.path, what)
            if pkg.license_path is None:
                licence = _licence_from_header(body, _member(tar, "package.json", what), what)
            else:
                licence = _member(tar, pkg.license_path, what)
        files[pkg.vendored_as], files[pkg.license_as] = body, licence
        records.append(
            {
                "package": pkg.name,
                "version": pkg.version,
                "tarball": dist["tarball"],
                "integrity": dist["integrity"],
                "path": pkg.path,
                "file": pkg.vendored_as,
                "sha256": sha256_bytes(body),
                "license_path": pkg.license_path or f"(written: the @license header of {pkg.path} + MIT)",
                "license_file": pkg.license_as,
                "license_sha256": sha256_bytes(licence),
            }
        )
    vendor_dir.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (vendor_dir / name).write_bytes(data)
    (vendor_dir / "SOURCES.json").write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    return records


def check(vendor_dir: Path = VENDOR_DIR) -> list[str]:
    """Compare the files in ``vendor_dir`` with the sha256 sums in its SOURCES.json, offline.

    Returns one line per problem (a missing or changed file, a package missing from SOURCES.json); an empty
    list means every file is as fetched.
    """
    sources = vendor_dir / "SOURCES.json"
    if not sources.is_file():
        return [f"{sources} is missing (run: python -m course_tools.vendor_js)"]
    records = json.loads(sources.read_text(encoding="utf-8"))
    problems = []
    listed = {(r["package"], r["version"]) for r in records}
    for pkg in PACKAGES:
        if (pkg.name, pkg.version) not in listed:
            problems.append(f"{pkg.name}@{pkg.version} is not in {sources.name}")
    for r in records:
        for name, expected in ((r["file"], r["sha256"]), (r["license_file"], r["license_sha256"])):
            f = vendor_dir / name
            if not f.is_file():
                problems.append(f"{name} ({r['package']}@{r['version']}) is missing")
                continue
            actual = sha256_bytes(f.read_bytes())
            if actual != expected:
                problems.append(
                    f"{name} ({r['package']}@{r['version']}) has sha256 {actual}, {sources.name} says {expected}"
                )
    return problems


# ------------------------------------------------------------------------------------------------------
# Bundles: several files of one package (the static site's KaTeX)
# ------------------------------------------------------------------------------------------------------

KATEX_DIR = Path(__file__).resolve().parent / "static" / "katex"


@dataclass(frozen=True)
class Bundle:
    """One npm package of which several files are vendored, keeping their layout below ``root``."""

    name: str
    version: str
    root: str  # the folder inside the tarball (below ``package/``) whose layout is kept
    patterns: tuple[str, ...]  # fnmatch patterns below root; each must match at least one file
    license_path: str
    folder: Path

    @property
    def tarball_url(self) -> str:
        return f"{REGISTRY}/{self.name}/-/{self.name}-{self.version}.tgz"


KATEX = Bundle(
    "katex",
    "0.19.1",
    "dist",
    ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js", "fonts/*.woff2"),
    "LICENSE",
    KATEX_DIR,
)


# MiniSearch (MIT, no dependencies): the site's full-text search, indexed in the reader's browser from the
# documents course_tools.site writes; its UMD build sets window.MiniSearch when loaded before require.js.
MINISEARCH = Bundle(
    "minisearch",
    "7.2.0",
    "dist/umd",
    ("index.js",),
    "LICENSE.txt",
    Path(__file__).resolve().parent / "static" / "minisearch",
)
SITE_BUNDLES = (KATEX, MINISEARCH)


def fetch_bundle(bundle: Bundle = KATEX, folder: Path | None = None) -> dict:
    """Download ``bundle``'s tarball, verify it, write its files, its licence and SOURCES.json to ``folder``.

    Returns the record written to SOURCES.json (one sha256 per file). Nothing is written unless the tarball
    matched the registry's integrity and every pattern matched a file.
    """
    import fnmatch

    folder = bundle.folder if folder is None else Path(folder)
    what = f"{bundle.name}@{bundle.version}"
    tgz, dist = _tarball(bundle.name, bundle.version, bundle.tarball_url)
    files = {}
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        prefix = f"package/{bundle.root}/"
        inside = sorted(m.name[len(prefix) :] for m in tar.getmembers() if m.isfile() and m.name.startswith(prefix))
        for pattern in bundle.patterns:
            hits = [f for f in inside if fnmatch.fnmatchcase(f, pattern)]
            if not hits:
                raise ValueError(f"{what}: nothing in {bundle.root}/ matches {pattern!r}")
            for f in hits:
                files[f] = _member(tar, f"{bundle.root}/{f}", what)
        licence = _member(tar, bundle.license_path, what)
    record = {
        "package": bundle.name,
        "version": bundle.version,
        "tarball": dist["tarball"],
        "integrity": dist["integrity"],
        "root": bundle.root,
        "license_path": bundle.license_path,
        "license_file": "LICENSE",
        "license_sha256": sha256_bytes(licence),
        "files": {name: sha256_bytes(data) for name, data in sorted(files.items())},
    }
    for name, data in [*files.items(), ("LICENSE", licence)]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    (folder / "SOURCES.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def check_bundle(bundle: Bundle = KATEX, folder: Path | None = None) -> list[str]:
    """Compare ``bundle``'s files in ``folder`` with the sha256 sums of its SOURCES.json, offline.

    Returns one line per problem (a missing or changed file, another version recorded); empty: all as fetched.
    """
    folder = bundle.folder if folder is None else Path(folder)
    sources = folder / "SOURCES.json"
    if not sources.is_file():
        return [f"{sources} is missing (run: python -m course_tools.vendor_js --site)"]
    record = json.loads(sources.read_text(encoding="utf-8"))
    if (record.get("package"), record.get("version")) != (bundle.name, bundle.version):
        return [
            f"{sources} records {record.get('package')}@{record.get('version')}, "
            f"expected {bundle.name}@{bundle.version} (run: python -m course_tools.vendor_js --site)"
        ]
    problems = []
    for name, expected in [*record["files"].items(), ("LICENSE", record["license_sha256"])]:
        f = folder / name
        if not f.is_file():
            problems.append(f"{name} ({bundle.name}@{bundle.version}) is missing")
        elif sha256_bytes(f.read_bytes()) != expected:
            problems.append(
                f"{name} ({bundle.name}@{bundle.version}) has sha256 {sha256_bytes(f.read_bytes())}, "
                f"{sources.name} says {expected}"
            )
    return problems


def _main_site(check_only: bool) -> int:
    """``--site``: fetch or check every bundle of :data:`SITE_BUNDLES`."""
    if check_only:
        failed = False
        for bundle in SITE_BUNDLES:
            problems = check_bundle(bundle)
            for p in problems:
                print(f"FAILED: {p}")
            if not problems:
                print(f"ok: {bundle.name}@{bundle.version} in {bundle.folder} matches SOURCES.json")
            failed = failed or bool(problems)
        return 1 if failed else 0
    for bundle in SITE_BUNDLES:
        record = fetch_bundle(bundle)
        print(
            f"{record['package']}@{record['version']}: {len(record['files'])} files in {bundle.folder} "
            f"(tarball {record['integrity']})"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_tools.vendor_js", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only verify the files on disk (offline)")
    parser.add_argument("--dir", type=Path, default=VENDOR_DIR, help=f"the vendor folder (default {VENDOR_DIR})")
    parser.add_argument(
        "--site",
        action="store_true",
        help="the static site's bundles instead: "
        + ", ".join(f"{b.name}@{b.version} (in {b.folder})" for b in SITE_BUNDLES),
    )
    args = parser.parse_args(argv)
    if args.site:
        return _main_site(args.check)
    if args.check:
        problems = check(args.dir)
        for p in problems:
            print(f"FAILED: {p}")
        if not problems:
            print(f"ok: {len(PACKAGES)} packages in {args.dir} match SOURCES.json")
        return 1 if problems else 0
    for r in fetch(args.dir):
        print(f"{r['package']}@{r['version']}: {r['file']} sha256 {r['sha256']} (tarball {r['integrity']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
