"""``load_template``: libyaml's parse equals PyYAML's, each call a copy, an edit read again."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import yaml  # type: ignore[import-untyped]  # no stubs here, as in template.py

from dependency_tracker_local import template

if TYPE_CHECKING:
    from pathlib import Path


class _PurePythonCfnLoader(yaml.SafeLoader):  # type: ignore[misc]
    pass


_PurePythonCfnLoader.add_multi_constructor("!", template._short_form)


def test_the_template_reads_as_the_pure_python_parser_reads_it():
    text = template.TEMPLATE_PATH.read_text(encoding="utf-8")
    expected = yaml.load(text, Loader=_PurePythonCfnLoader)  # noqa: S506 - a SafeLoader
    assert template.load_template() == expected


def test_each_call_gets_its_own_copy():
    first = template.load_template()
    first["Resources"].clear()
    assert template.load_template()["Resources"]


def test_an_edited_file_is_read_again(tmp_path: Path):
    path = tmp_path / "template.yaml"
    path.write_text("Resources:\n  A: !Ref B\n", encoding="utf-8")
    assert template.load_template(path) == {"Resources": {"A": {"Ref": "B"}}}
    stat = path.stat()
    path.write_text("Resources:\n  A: !Ref C\n", encoding="utf-8")
    # Same size and the same modification time as before: only a new time tells them apart.
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000))
    assert template.load_template(path) == {"Resources": {"A": {"Ref": "C"}}}
