"""The ACP Registry manifest (editors/acp/registry/pi-bridge/) against the registry's own schema,
vendored as a fixture (tests/fixtures/acp_registry/SOURCE.md names where it came from), and the
registry's layout rules: the folder is the entry's id, an SVG icon beside it, and the version and
command are the ones this package ships."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bridge import __version__

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "editors" / "acp" / "registry" / "pi-bridge"
SCHEMA = ROOT / "tests" / "fixtures" / "acp_registry" / "agent.schema.json"


def _manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ENTRY / "agent.json").read_text())
    return loaded


def _errors(manifest: dict[str, Any]) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    return [error.message for error in validator.iter_errors(manifest)]


def test_the_manifest_validates_against_the_registry_schema() -> None:
    assert _errors(_manifest()) == []


def test_the_schema_check_catches_a_broken_manifest() -> None:
    broken = {**_manifest(), "id": "Pi Bridge", "distribution": {"pip": {"package": "pi-bridge"}}}
    del broken["description"]
    problems = " | ".join(_errors(broken))
    assert "'description' is a required property" in problems
    assert "does not match" in problems and "Additional properties are not allowed" in problems


def test_the_manifest_follows_the_registry_layout_and_names_this_package() -> None:
    manifest = _manifest()
    assert ENTRY.name == manifest["id"]
    icon = (ENTRY / "icon.svg").read_text()
    assert icon.lstrip().startswith("<svg") and 'viewBox="0 0 16 16"' in icon
    assert manifest["version"] == __version__
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    uvx = manifest["distribution"]["uvx"]
    assert uvx["package"] == f"{project['name']}=={__version__}"
    assert uvx["args"] == ["acp"] and project["scripts"]["pi-bridge"]


@pytest.mark.parametrize("field", ["id", "name", "version", "description", "distribution"])
def test_every_required_field_is_there(field: str) -> None:
    assert _manifest().get(field)
