"""The harness side of the client shims (peers/shimrun/): shim.toml loading, version pins, cached builds, the
JSON-lines conversation; and the python-proton shim end to end against the embedded reference broker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from amqp_conformance.peers.shimrun import (
    ShimError,
    discover,
    load_spec,
)

GOOD = {
    "client": '"fake"', "title": '"a fake (Python)"', "language": '"python"', "library": '"fake-lib"',
    "version": '"1.2.3"', "requires": "[]", "build": "[]", "run": '["{python}", "fake.py"]',
}


def write_spec(folder: Path, **changes: str | None) -> Path:
    """A shim.toml in ``folder`` from GOOD with ``changes`` (None drops a key)."""
    folder.mkdir(parents=True, exist_ok=True)
    fields = {**GOOD, **changes}
    (folder / "shim.toml").write_text("".join(f"{k} = {v}\n" for k, v in fields.items() if v is not None))
    return folder


# -- shim.toml ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("changes", "expected"), [
    ({"colour": '"blue"'}, "unknown key `colour`"),
    ({"run": None}, "missing key `run`"),
    ({"requires": '"node"'}, "`requires` must be a list of strings"),
    ({"build": '[["go", "build"], []]'}, "`build` must be a list of commands"),
    ({"build": '["go", "build"]'}, "`build` must be a list of commands"),
    ({"run": "[]"}, "`run` must be a non-empty list of strings"),
    ({"version": "3"}, "`version` must be a string"),
    ({"client": '"other"'}, "`client` is 'other' but the folder is 'fake'"),
    ({"version": '"1.0/../../x"'}, "cannot name a folder"),
    ({"run": '["{hom}/shim"]'}, "unknown placeholder {hom}"),
    ({"apt": '"make"'}, "`apt` must be a list of strings"),
])
def test_a_wrong_shim_toml_is_one_line_naming_the_file_and_the_field(tmp_path, changes, expected):
    folder = write_spec(tmp_path / "fake", **changes)
    with pytest.raises(ShimError) as caught:
        load_spec(folder)
    message = str(caught.value)
    assert expected in message
    assert str(folder / "shim.toml") in message
    assert "\n" not in message


def test_a_shim_toml_that_is_not_toml_says_so(tmp_path):
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "shim.toml").write_text('client = "fake\n')
    with pytest.raises(ShimError, match="not valid TOML"):
        load_spec(tmp_path / "fake")


def test_a_good_shim_toml_loads_with_its_placeholders_substituted(tmp_path):
    spec = load_spec(write_spec(tmp_path / "fake", apt='["make"]', build='[["{python}", "-c", "pass"]]'))
    assert (spec.client, spec.version, spec.requires, spec.apt) == ("fake", "1.2.3", (), ("make",))
    assert spec.command(Path("/built")) == [sys.executable, "fake.py"]
    assert spec.build_commands(Path("/built")) == [[sys.executable, "-c", "pass"]]


def test_discover_finds_every_folder_with_a_shim_toml(tmp_path):
    write_spec(tmp_path / "fake")
    (tmp_path / "notes").mkdir()
    (tmp_path / "README.md").write_text("x")
    assert list(discover(tmp_path)) == ["fake"]
    with pytest.raises(ShimError, match="no shims folder"):
        discover(tmp_path / "missing")


def test_the_repository_has_the_python_proton_shim():
    assert "python-proton" in discover()


