"""The strict YAML reader behind the one config loader (:func:`analysis.config.loader.load_config`).

``yaml.safe_load`` semantics (no tags that construct Python objects), plus: duplicate
mapping keys are an error naming both lines; aliases are allowed but the document,
expanded, is bounded in size and depth (an alias bomb fails in microseconds, before
anything is constructed); values are only ever shown through a bounded repr.
"""

from __future__ import annotations

import reprlib
from typing import Any

import yaml

from analysis.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "parse_yaml", "show_value"]

_REPR = reprlib.Repr()
# Bounded: YAML aliases can make a small file a huge shared structure; never expand it.
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 2, 4, 4, 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 60


def show_value(value: Any) -> str:
    """Short one-line repr of an offending value (bounded in time and size)."""
    text = _REPR.repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."



MAX_CONFIG_BYTES = 10_000_000
MAX_YAML_NODES = 100_000  # after alias expansion; a real config has a few hundred
MAX_YAML_DEPTH = 200


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate mapping keys and alias bombs.

    Aliases are allowed (``&defaults`` / ``*defaults``, merge keys ``<<``) as long as the
    document, with every alias expanded, has at most :data:`MAX_YAML_NODES` nodes and
    depth :data:`MAX_YAML_DEPTH`, and no alias refers to a node containing itself. The
    check counts each node once (memoised), so a "billion laughs" document is refused
    in microseconds, before anything is constructed.
    """

    def compose_document(self):  # noqa: D102 (PyYAML API)
        node = super().compose_document()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_mapping(self, node, deep=False):  # noqa: D102 (PyYAML API)
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # keys merged from an alias may be overridden: that is YAML
                key = self.construct_object(key_node, deep=False)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # unhashable key: PyYAML reports it below
                    continue
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None, None,
                        f"duplicate key {show_value(key)} (first at line {first.start_mark.line + 1})",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a YAML graph whose alias expansion is too large, too deep or cyclic."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    active: set[int] = set()

    def visit(node: yaml.Node, level: int) -> tuple[int, int]:
        key = id(node)
        if key in active:
            raise yaml.composer.ComposerError(
                None, None, "recursive alias (a node containing itself)", node.start_mark
            )
        if key in sizes:
            return sizes[key], depths[key]
        if level > MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", node.start_mark
            )
        active.add(key)
        size, depth = 1, 0
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            s, d = visit(child, level + 1)
            size, depth = size + s, max(depth, d + 1)
            if size > MAX_YAML_NODES:
                raise yaml.composer.ComposerError(
                    None, None,
                    f"more than {MAX_YAML_NODES} values once aliases are expanded "
                    "(an alias bomb?)",
                    node.start_mark,
                )
        active.discard(key)
        sizes[key], depths[key] = size, depth
        return size, depth

    visit(root, 0)


def parse_yaml(text: str, source: str = "<config>") -> Any:
    """Parse YAML text with :class:`_StrictLoader`; problems are one-line ConfigErrors."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}:{line} invalid YAML: {problem}".replace("\n", " ")) from None
    except RecursionError:  # PyYAML's composer recurses per nesting level
        raise ConfigError(f"{source}: invalid YAML: nested too deeply") from None
