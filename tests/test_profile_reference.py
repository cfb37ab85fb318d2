"""docs/profile.md's field reference is generated from the profile's declarations (sglang_deploy/profile/reference.py),
as docs/settings.md is from the host settings: a field added, renamed or given another default changes the page."""

from typing import Annotated, Literal

import pytest
from pydantic import Field

from conftest import REPO
from sglang_deploy.profile import Profile
from sglang_deploy.profile.reference import accepts, block, page, sections


def test_the_profile_page_is_generated_from_the_declarations():
    assert (REPO / "docs" / "profile.md").read_text() == page((REPO / "docs" / "profile.md").read_text()), \
        "regenerate it: .venv/bin/python -m sglang_deploy.profile.reference --write docs/profile.md"


def test_every_profile_field_says_what_it_is():
    bare = [f"{title}.{name}" for title, model in sections(Profile) for name, field in model.model_fields.items()
            if not field.exclude and not (field.description or "").strip()]
    assert bare == []


def test_every_section_and_key_is_on_the_page():
    text = block()
    for title, model in sections(Profile):
        assert f"### `{title}`" in text or title == "top level"
        for name, field in model.model_fields.items():
            assert field.exclude or f"| `{name}` |" in text
    assert "| `min_decode_tok_s` | number (at least 1) or null | null | Floor for single-stream decode" in text


@pytest.mark.parametrize("annotation, text", [
    (Annotated[int, Field(ge=1024, le=65535)], "integer (at least 1024, at most 65535)"),
    (Annotated[float, Field(gt=0, le=50)], "number (above 0, at most 50)"),
    (Annotated[float, Field(strict=True)] | None, "number or null"),
    (Literal["rollback", "keep"], "one of `rollback`, `keep`"),
    (list[str], "list of text"),
    (dict[str, bool], "mapping of text to true/false"),
])
def test_what_a_field_accepts_is_said_in_words(annotation, text):
    assert accepts(annotation) == text


def test_a_page_without_its_markers_is_refused():
    with pytest.raises(ValueError, match="no generated block"):
        page("# Profile format\n")
