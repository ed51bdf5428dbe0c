"""Tests for mpbroker/config/properties.py: the server.properties parser and --override arguments."""
import pytest

from mpbroker.config import ConfigError, parse_overrides, parse_properties


def test_properties_syntax_like_java():
    text = (
        "# comment\n"
        "! bang comment\n"
        "   \n"
        "a=1\n"
        "b: 2\n"
        "c 3\n"
        "d   =   spaced value  \n"
        "e=first \\\n"
        "    second \\\n"
        "  third\n"
        "f=tab\\there\\nnew\n"
        "g\\=key=v\n"
        "h=\\u0041BC\n"
        "i=\n"
        "j\n"
        "k=ends with even backslashes \\\\\n"
        "l=x=y:z\n"
        "a=override\n"
    )
    p = parse_properties(text)
    assert p["a"] == "override"
    assert p["b"] == "2"
    assert p["c"] == "3"
    assert p["d"] == "spaced value  "
    assert p["e"] == "first second third"
    assert p["f"] == "tab\there\nnew"
    assert p["g=key"] == "v"
    assert p["h"] == "ABC"
    assert p["i"] == "" and p["j"] == ""
    assert p["k"] == "ends with even backslashes \\"
    assert p["l"] == "x=y:z"
    assert "# comment" not in p and len(p) == 12


def test_overrides():
    assert parse_overrides(["a=b", "c=d=e"]) == {"a": "b", "c": "d=e"}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])
