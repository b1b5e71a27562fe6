"""Module names in a framework's vocabulary: which one a partition uses, translation, what a parser would misread.

torchtitan names a Llama-style model's modules ``tok_embeddings``, ``layers.N``, ``norm``, ``lm_head``;
NeMo AutoModel trains Hugging Face models, ``model.embed_tokens``, ``model.layers.N``, ``model.norm``,
``lm_head``. A partition is translated name by name between the two; names neither uses pass through
unchanged, with a warning. Cost: linear in the number of names.
"""

from __future__ import annotations

from typing import Optional, cast

from schedc.core.partition import module_name_problem
from schedc.errors import SchedcError
from schedc.model_costs import UNIT_NAMES


def _roles(unit_names: tuple[str, str, tuple[str, ...]]) -> dict[str, str]:
    """name -> role ('embed', 'head0', ...) for the fixed names; layers are matched by pattern."""
    embed, _, head = unit_names
    return {embed: "embed", **{name: f"head{k}" for k, name in enumerate(head)}}


def _layer_index(name: str, unit_names) -> Optional[str]:
    prefix = unit_names[1].split("{}")[0]
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return rest if rest.isdigit() else None


def speaks(names: list[str], unit_names) -> bool:
    """Every name is one of the framework's unit names."""
    roles = _roles(unit_names)
    return bool(names) and all(n in roles or _layer_index(n, unit_names) is not None for n in names)


def translate(partition: list[list[str]], source, target) -> list[list[str]]:
    """The partition, written in ``source``'s unit names, in ``target``'s."""
    by_role = {role: name for name, role in _roles(target).items()}
    roles = _roles(source)
    out = []
    for stage in partition:
        names = []
        for name in stage:
            index = _layer_index(name, source)
            names.append(target[1].format(index) if index is not None else by_role[roles[name]])
        out.append(names)
    return out


def check_module_names(partition: list[list[str]], where: str = "partition") -> None:
    """SchedcError naming the first module name of the partition a framework would misread."""
    for s, stage in enumerate(partition):
        for name in stage:
            problem = module_name_problem(name)
            if problem:
                raise SchedcError(f"{where}: module name {ascii(name)[:80]} (stage {s}) {problem}")


# (embedding, layer pattern, head modules) of a Llama-style model in each vocabulary: the names
# per-unit profiles are written in (one table, model_costs'), which a framework module picks from
# (a framework's own lands there: register); model_costs spells its entries with two head modules
VOCABULARIES = cast("dict[str, tuple[str, str, tuple[str, ...]]]", UNIT_NAMES)
_LABELS = {"torchtitan": "torchtitan's", "hf": "Hugging Face's (NeMo AutoModel's)"}


def describe(vocabulary: str) -> str:
    embed, layer, head = VOCABULARIES[vocabulary]
    return f"{_LABELS.get(vocabulary, vocabulary)} ({embed}, {layer.format('N')}, {', '.join(head)})"


def in_own_names(partition: list[list[str]], own: str, framework: str) -> tuple[list[list[str]], list[str]]:
    """The partition in vocabulary ``own``, translated when it is in another known one, and the
    warnings to print (names translated, or names neither vocabulary has)."""
    flat = [name for stage in partition for name in stage]
    if speaks(flat, VOCABULARIES[own]):
        return partition, []
    for other, names in VOCABULARIES.items():
        if other != own and speaks(flat, names):
            return translate(partition, names, VOCABULARIES[own]), [
                f"the profile names modules as {describe(other)}; translated to {describe(own)} for {framework}"]
    unknown = [name for name in flat if not speaks([name], VOCABULARIES[own])][:3]
    return partition, [f"module names {', '.join(map(ascii, unknown))} are not {describe(own)}: {framework} needs "
                       "the model's own module paths (named_modules()); check them or rename"]
