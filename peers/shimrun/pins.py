"""The library version a shim's build file pins, read from the file, so it can be checked against ``shim.toml``.

Which file pins it, and how it is read:

- ``pom.xml``: the ``<dependency>`` whose ``groupId:artifactId`` is ``library``; its ``<version>``, with a
  ``${property}`` resolved from ``<properties>``.
- ``package.json``: ``dependencies`` (or ``devDependencies``) of ``library``, which must be the exact version
  (``^3.0.5`` is not a pin); ``package-lock.json``: the version it locked for ``library``.
- ``go.mod``: the ``require`` of module ``library`` (``v1.7.0`` pins ``1.7.0``).
- ``Makefile``: its one ``NAME_VERSION := X`` (or ``=``, ``?=``) assignment.
- ``pyproject.toml``: the ``library==X`` (or ``library==X.*``, which pins ``X``) requirement in
  ``[project] dependencies``. A shim that runs on the harness's interpreter (``run`` starts with ``{python}``)
  drives the library the project installs: the project's own ``pyproject.toml`` is its build file.
"""

from __future__ import annotations

import json
import re
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from .errors import ShimError
from .spec import ShimSpec

PROJECT_PYPROJECT = Path(__file__).resolve().parent.parent.parent / "pyproject.toml"
POM_NS = "{http://maven.apache.org/POM/4.0.0}"
MAKE_VERSION = re.compile(r"^\s*([A-Za-z0-9_]*VERSION)\s*(?::=|\?=|=)\s*(\S+)\s*(?:#.*)?$", re.MULTILINE)
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*?)\s*(?:;.*)?$")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ShimError(f"{path}: cannot read it ({exc}); check the shim's files") from None


def pom_version(pom: Path, library: str) -> str:
    """The version ``pom`` gives the dependency ``library`` (``groupId:artifactId``), ``${property}`` resolved."""
    group, _, artifact = library.partition(":")
    if not group or not artifact:
        raise ShimError(f"{pom}: shim.toml's library {library!r} is not groupId:artifactId; name the Maven "
                        f"artifact the pom depends on")
    try:
        root = ET.fromstring(_read(pom))
    except ET.ParseError as exc:
        raise ShimError(f"{pom}: not valid XML ({exc}); fix the pom") from None
    ns = POM_NS if root.tag.startswith(POM_NS) else ""
    for dependency in root.iter(f"{ns}dependency"):
        if (dependency.findtext(f"{ns}groupId", "").strip() == group
                and dependency.findtext(f"{ns}artifactId", "").strip() == artifact):
            version = dependency.findtext(f"{ns}version", "").strip()
            found = re.fullmatch(r"\$\{([^}]+)\}", version)
            if found:
                value = root.findtext(f"{ns}properties/{ns}{found.group(1)}", "").strip()
                if not value:
                    raise ShimError(f"{pom}: {library}'s version is {version} but <properties> has no "
                                    f"<{found.group(1)}>; define it")
                return value
            if not version:
                raise ShimError(f"{pom}: the dependency {library} has no <version>; pin it")
            return version
    raise ShimError(f"{pom}: no <dependency> on {library}; depend on the library shim.toml names")


def package_json_version(path: Path, library: str) -> str:
    """The version ``package.json`` asks for ``library`` (as written: a range stays a range)."""
    data = _json(path)
    for section in ("dependencies", "devDependencies"):
        found = data.get(section, {}).get(library)
        if isinstance(found, str):
            return found
    raise ShimError(f"{path}: no dependency on {library!r}; add it with its exact version")


def package_lock_version(path: Path, library: str) -> str:
    """The version ``package-lock.json`` locked for ``library`` (lockfile versions 1 to 3)."""
    data = _json(path)
    entry = data.get("packages", {}).get(f"node_modules/{library}") or data.get("dependencies", {}).get(library)
    if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
        raise ShimError(f"{path}: locks no version of {library!r}; run npm install and commit the lock file")
    return entry["version"]


def _json(path: Path) -> dict:
    try:
        data = json.loads(_read(path))
    except ValueError as exc:
        raise ShimError(f"{path}: not valid JSON ({exc}); fix it") from None
    if not isinstance(data, dict):
        raise ShimError(f"{path}: not a JSON object; fix it")
    return data


def go_mod_version(path: Path, library: str) -> str:
    """The version ``go.mod`` requires of module ``library``, without Go's leading ``v``."""
    in_block = False
    for raw in _read(path).splitlines():
        line = raw.split("//", 1)[0].strip()
        if line.startswith("require ("):
            in_block = True
            continue
        if in_block and line == ")":
            in_block = False
            continue
        words = line.removeprefix("require ").split() if in_block or line.startswith("require ") else []
        if len(words) == 2 and words[0] == library:
            return words[1].removeprefix("v")
    raise ShimError(f"{path}: no require of {library}; go get {library}@v<version>")


def makefile_version(path: Path, library: str) -> str:
    """The value of the Makefile's one ``*VERSION`` variable, the version its build insists on."""
    found = MAKE_VERSION.findall(_read(path))
    if len(found) != 1:
        names = ", ".join(name for name, _ in found) or "none"
        raise ShimError(f"{path}: needs exactly one NAME_VERSION := X line pinning {library} (found: {names}); "
                        f"keep one")
    return found[0][1]


def pyproject_version(path: Path, library: str) -> str:
    """The version the ``library==X`` (or ``==X.*``) requirement of ``[project] dependencies`` pins."""
    try:
        data = tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as exc:
        raise ShimError(f"{path}: not valid TOML ({exc}); fix it") from None
    wanted = _normal(library)
    for requirement in data.get("project", {}).get("dependencies", []):
        found = REQUIREMENT.match(requirement)
        if found and _normal(found.group(1)) == wanted:
            pin = re.fullmatch(r"==\s*([^,\s*]+?)(\.\*)?", found.group(2))
            if pin is None:
                raise ShimError(f"{path}: {requirement!r} does not pin one version; write {library}==X or "
                                f"{library}==X.*")
            return pin.group(1)
    raise ShimError(f"{path}: [project] dependencies has no {library}; add {library}==X")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


READERS: dict[str, Callable[[Path, str], str]] = {
    "pom.xml": pom_version,
    "package.json": package_json_version,
    "package-lock.json": package_lock_version,
    "go.mod": go_mod_version,
    "Makefile": makefile_version,
    "pyproject.toml": pyproject_version,
}


def pinned_versions(spec: ShimSpec) -> list[tuple[Path, str]]:
    """Each build file of ``spec`` and the version it pins for ``spec.library``, in :data:`READERS` order.

    :class:`ShimError` when a build file is present but pins nothing for the library.
    """
    files = [spec.folder / name for name in READERS if (spec.folder / name).is_file()]
    if spec.run[0] == "{python}" and not (spec.folder / "pyproject.toml").is_file() and PROJECT_PYPROJECT.is_file():
        files.append(PROJECT_PYPROJECT)
    return [(path, READERS[path.name](path, spec.library)) for path in files]


def check_pin(spec: ShimSpec) -> list[Path]:
    """The build files that pin ``spec.library`` at exactly ``spec.version``; :class:`ShimError` naming the file and
    both versions on a difference, or when no build file pins it at all."""
    found = pinned_versions(spec)
    if not found:
        raise ShimError(f"{spec.spec_file}: no build file pins {spec.library} ({', '.join(READERS)}); pin "
                        f"version {spec.version} in the shim's build file")
    for path, version in found:
        if version != spec.version:
            raise ShimError(f"{spec.spec_file}: version is {spec.version!r} but {path} pins {spec.library} at "
                            f"{version!r}; make them the same")
    return [path for path, _ in found]
