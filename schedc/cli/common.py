"""What several commands share: the cost and model arguments, reading + validating CSVs with a profile each.

Every command module is a pair: ``register(subparsers)`` declares its parser and sets
``handler=run``; ``run(args) -> int`` calls the Python API and prints. A user-facing failure is a
:class:`SchedcError` (or an OSError on a path); ``schedc.cli.toplevel.main`` turns it into one line on stderr.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Optional, get_args

from pydantic import ValidationError

from schedc.choices import Execution
from schedc.core.costs import MemoryLimit, Profile, describe_validation_error, parse_comm, parse_costs, size_unit
from schedc.errors import SchedcError, printable, shown
from schedc.io.fileio import check_not_input, check_writable


def add_cost_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("costs")
    g.add_argument("--profile", metavar="P.json", type=path, help="measured per-stage costs (schedc profile)")
    g.add_argument("--costs", metavar="F,I,W", default=None,
                   help="identical stages: seconds (or units) of F, I, W (default 1,1,1)")
    g.add_argument("--comm", metavar="C", default=None,
                   help="communication time per stage boundary: one number or one per boundary")
    g.add_argument("--memory", metavar="SPEC", default=None,
                   help="per-rank memory limit: Kp (1p = what 1F1B needs on its most loaded rank, the same cap for every "
                        "rank), a size or none; default 1p. Sizes: 80G = 80Gi = 80GiB (binary, 2^30 bytes a G, as "
                        "torch and nvidia-smi count), 80GB (decimal, 10^9 bytes)")
    g.add_argument("--runtime", choices=get_args(Execution), default=None,
                   help="how the schedule is executed: torch (stage 0's backward all in W, as torch's "
                        "_PipelineScheduleRuntime runs it; default) or ideal (the zero-bubble paper's model)")


_RATE = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([kKmMgGtT]?)(i?)([bB]?)")


def rate(text: str, flag: str) -> float:
    """Bytes per second from a size per second as ``--memory`` takes sizes (``50GB/s``,
    ``46.6GiB/s``, ``50gb/s``) or a plain number (``5e10``); one line naming `flag` otherwise.
    ``50Gb/s`` is refused: a lower-case b after an upper-case prefix is how links are quoted in
    bits, 8x fewer bytes than the same digits in GB/s, so guessing either way would silently
    misprice every transfer."""
    t = str(text).strip().replace(" ", "")
    body = t[:-2] if t.lower().endswith("/s") else t
    m = _RATE.fullmatch(body) if len(body) <= 100 else None
    if m is None or (m.group(3) and not m.group(2)):
        raise SchedcError(f"{flag}: expected bytes per second, e.g. 50GB/s, 46.6GiB/s or 5e10, got {shown(text)}")
    number, prefix, binary, b = m.groups()
    unit = size_unit(f"{prefix}{binary}{b}".lower()) if prefix or b else 1
    if b == "b" and prefix.isupper():
        raise SchedcError(f"{flag}: {shown(text)} reads as bits per second (b: bits, B: bytes); give bytes per "
                          f"second, e.g. {float(number) * unit / 8 / 1e9:.4g}GB/s")
    value = float(number) * unit
    if not (value > 0 and math.isfinite(value)):
        raise SchedcError(f"{flag}: must be a positive, finite number of bytes per second (e.g. 50GB/s), "
                          f"got {shown(text)}")
    return value


def path(text: str) -> str:
    """An argparse ``type`` for a file name: the empty string (an unset shell variable in
    ``--profile "$P"``) is refused, naming the flag, where it passed as the flag left out (the
    default costs were used, or the CSV printed instead of written)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty file name; give a path")
    return text


def count(what: str, limit: int):
    """An argparse ``type`` for a count flag (``--ranks``, ``--stages``, ``--mb``): a whole number
    1..`limit` (a bound of schedc.core.limits), else argparse's one-line error naming the flag and
    the range, before any work (``plan --ranks 4097`` failed later, naming units and stages)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {what}; give 1 to {limit}") from None
        if not 1 <= value <= limit:
            raise argparse.ArgumentTypeError(
                f"must be at least 1, got {value}" if value < 1 else
                f"{value} is more {what} than schedc handles (at most {limit:,}); give 1 to {limit}")
        return value

    parse.__name__ = what  # argparse names the type in its own messages
    return parse


def ranks_count():
    """:func:`count` for ``--ranks`` (at most ``limits.MAX_RANKS``)."""
    from schedc.core import limits

    return count("ranks", limits.MAX_RANKS)


def stages_count():
    """:func:`count` for ``--stages`` (at most ``limits.MAX_STAGES``)."""
    from schedc.core import limits

    return count("stages", limits.MAX_STAGES)


def microbatches_count():
    """:func:`count` for ``--mb`` (at most ``limits.MAX_MICROBATCHES``)."""
    from schedc.core import limits

    return count("microbatches", limits.MAX_MICROBATCHES)


def given(**kwargs) -> dict:
    """The keyword arguments whose flag was given (not None): a flag left out is left out of the
    call, so that the Python API's default is the one default (schedc.api)."""
    return {k: v for k, v in kwargs.items() if v is not None}


def defaults_of(function) -> dict:
    """The keyword defaults of `function` (for a message that says what a run will use when a
    flag was left out: the value is the function's, read, not restated)."""
    import inspect

    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not p.empty}


def profile_from_args(args, n_stages: int) -> Optional[Profile]:
    """The profile named by --profile, or identical stages from --costs/--comm; None when none of
    them is given (the API's default costs apply)."""
    if args.profile:
        if args.costs is not None:
            raise SchedcError("give either --profile or --costs, not both")
        profile = Profile.load(args.profile)
        if args.comm is not None:
            profile = _with_comm(profile, args.comm)
        return profile
    if args.costs is None and args.comm is None:
        return None
    # --costs "" is an error, not the default
    profile = Profile.uniform(n_stages) if args.costs is None else uniform_costs(args.costs, n_stages)
    return _with_comm(profile, args.comm) if args.comm is not None else profile


def uniform_costs(costs: str, n_stages: int) -> Profile:
    """Identical stages of --costs F,I,W; their sum over the stages checked in one line naming the
    flag (F + I + W may add up while the step through every stage does not: 1e308,1,1)."""
    try:
        return Profile.uniform(n_stages, *parse_costs(costs))
    except ValidationError as e:
        raise SchedcError(f"--costs {costs}: {describe_validation_error(e)}") from None


def _with_comm(profile: Profile, comm: str) -> Profile:
    """The profile with --comm's times, checked before pydantic sees them (one line, not a dump)."""
    values = parse_comm(comm)
    n = profile.n_stages
    if isinstance(values, list) and len(values) != n - 1:
        raise SchedcError(f"--comm: {len(values)} values given, but {n} stages have {n - 1} boundaries; "
                          f"give one number (every boundary) or {n - 1} separated by commas")
    try:
        return Profile.model_validate({**profile.model_dump(), "comm": values})
    except ValidationError as e:
        raise SchedcError(f"--comm {comm}: {describe_validation_error(e)}") from None


def memory_from_args(args) -> Optional[MemoryLimit]:
    """--memory (None when not given: the API's default); a byte size needs a --profile (with
    --costs, memory counts activations, not bytes)."""
    if args.memory is None:
        return None
    memory = MemoryLimit.parse(args.memory)
    if memory.kind == "bytes" and not getattr(args, "profile", None):
        raise SchedcError(f"--memory {args.memory} is a byte size, but without --profile memory is counted in "
                          "microbatch activations, not bytes; give --memory Kp (e.g. 1.5p) or a measured --profile")
    return memory


def judged_memory(args, bytes_need_profile: bool = True) -> MemoryLimit:
    """The limit simulate, plot and trace judge a CSV against: --memory, else the one a compile
    compiles for by default (schedc.api.DEFAULT_MEMORY), so that "fits" means the same in both.
    `bytes_need_profile` False: the costs come from beside the CSV, so a byte size may count."""
    from schedc import api

    memory = memory_from_args(args) if bytes_need_profile else \
        (MemoryLimit.parse(args.memory) if args.memory is not None else None)
    return memory if memory is not None else MemoryLimit.parse(api.DEFAULT_MEMORY)


def input_files(args) -> list[tuple[str, str]]:
    """The files a command reads, each with how the user named it (for check_outputs' message)."""
    from schedc.io import csvio

    schedules = list(getattr(args, "files", None) or []) + ([args.file] if getattr(args, "file", None) else [])
    out = [(f, "schedule") for f in schedules]
    for f in schedules:  # the costs beside a CSV are read too (`trace s.csv -o s.json` wrote over its report)
        out += [(csvio.report_path(f), f"schedule {f}'s report"), (Path(f).with_suffix(".profile.json"),
                                                                   f"schedule {f}'s profile")]
    for flag in ("profile", "config", "partition", "model", "sample"):
        value = getattr(args, flag, None)
        # an option given several times (plan's --profile MODE=UNITS.json ...) is a list
        for one in (value if isinstance(value, list) else [value]):
            if not isinstance(one, str) or not one:
                continue
            if flag in ("model", "sample"):  # MODULE:FUNCTION, a file path or a module name
                out.append((one.rsplit(":", 1)[0], f"--{flag}"))
                continue
            out.append((one, f"--{flag}"))
            mode, sep, path = one.partition("=")
            if sep and mode.isidentifier():  # MODE=PATH
                out.append((path, f"--{flag}"))
    return out


def check_json_output(path: str, what: str, flag: str = "-o") -> None:
    """`flag` names a JSON output: a .csv name is a schedule's (`profile -o s.csv` wrote JSON over one)."""
    if str(path).lower().endswith(".csv"):
        raise SchedcError(f"{flag} {path}: {what} is JSON, and a .csv name is a schedule's; give a .json name")


def check_outputs(args, *outputs: tuple) -> None:
    """Before any work: every (path, option) output can be written and is none of the inputs
    (``compile --profile p.json -o p.csv`` would write its report over the profile)."""
    inputs = input_files(args)
    for path, option in outputs:
        check_writable(path, option)
        check_not_input(path, option, inputs)


def read_schedules(args) -> list:
    """Every CSV in args.files, read and validated (schedc.api), named by its file."""
    from schedc import api

    schedules = []
    for path in args.files:
        schedule = api.read_csv(path)
        api.validate(schedule)
        schedule.name = schedule.name or Path(path).stem
        schedules.append(schedule)
    return schedules


def read_checked(args, schedules=None):
    """Read and validate every CSV in args.files (schedc.api; `schedules`: already read by
    :func:`read_schedules`), with a profile for each, as --runtime executes it (the profile's own
    runtime, else torch's, when not given)."""
    profiles = []
    by_stage_count: dict[int, Profile] = {}  # read a --profile file once, not once per CSV
    schedules = read_schedules(args) if schedules is None else schedules
    for path, schedule in zip(args.files, schedules):
        if schedule.n_stages not in by_stage_count:
            by_stage_count[schedule.n_stages] = profile_from_args(args, schedule.n_stages) or \
                Profile.uniform(schedule.n_stages)  # what the API takes when given none
        profile = by_stage_count[schedule.n_stages]
        if profile.n_stages != schedule.n_stages:
            raise SchedcError(f"{path}: the schedule has {schedule.n_stages} stages but {args.profile} describes "
                              f"{profile.n_stages}; give a profile of this model's {schedule.n_stages} stages")
        profiles.append(profile.executed(args.runtime))
    return schedules, profiles


def costs_beside(csv, command: Optional[str] = None) -> Optional[tuple[Profile, str]]:
    """(the costs a CSV brings, the file they came from): ``NAME.profile.json`` beside ``NAME.csv``
    (``schedc plan`` writes one), else the costs its report ``NAME.json`` records (a plan's
    ``profile``, a compile's ``inputs.costs``); None when it brings none. A report that cannot be
    read or belongs to another version of the CSV brings none; `command` given, a warning says so
    (simulate, plot and trace leave that warning to :func:`warn_mismatches`, which reads the report too)."""
    from schedc.io import csvio

    path = Path(csv)
    profile_file = path.with_suffix(".profile.json")
    if profile_file.is_file():
        return Profile.load(profile_file), profile_file.name
    report_file = csvio.report_path(path)
    if not report_file.is_file():
        return None
    try:
        report = csvio.read_report(path)
    except SchedcError as e:  # e.g. a report of another version of the CSV: its costs are not this one's
        if command:
            warn(command, f"ignoring the report beside {path}: {e}")
        return None
    inputs = report.get("inputs")
    recorded = report.get("profile") or (inputs.get("costs") if isinstance(inputs, dict) else None)
    if not isinstance(recorded, dict):
        return None
    try:
        return Profile.model_validate(recorded), report_file.name
    except ValidationError as e:
        raise SchedcError(f"{report_file}: the costs it records are not a profile: {describe_validation_error(e)}; "
                          "give --profile or --costs") from None


def own_costs(paths, command: Optional[str] = None) -> Optional[list[tuple[Profile, str]]]:
    """:func:`costs_beside` for every CSV when each brings costs; None when none does, or when those
    that do bring only the default costs (a compile without --costs beside a hand-made baseline: the
    defaults judge both alike); else an error naming the file without (one run judges every CSV by
    its own costs or all by the same)."""
    found = [costs_beside(p, command) for p in paths]
    if not any(found):
        return None
    missing = [p for p, f in zip(paths, found) if f is None]
    if missing and all(_is_default(f[0]) for f in found if f):
        return None
    if missing:
        have = next(f"{p} ({f[1]})" for p, f in zip(paths, found) if f)
        raise SchedcError(f"{have} brings its costs but {missing[0]} has none: put {Path(missing[0]).stem}"
                          f".profile.json beside it, or give --profile or --costs for every file")
    return [f for f in found if f is not None]  # none is: every CSV brought its costs


def _is_default(profile: Profile) -> bool:
    """Whether `profile` is what a command uses when no costs are given (Profile.uniform)."""
    return profile.executed() == Profile.uniform(profile.n_stages).executed()


def read_own_costs(args, schedules=None):
    """(schedules, profiles as --runtime executes them, the file each profile came from) of every
    CSV in args.files with the costs it brings (:func:`own_costs`), or None when none brings any (then
    :func:`read_checked` gives every CSV the same costs); `schedules`: already read by
    :func:`read_schedules`."""
    schedules = read_schedules(args) if schedules is None else schedules
    found = own_costs(args.files)
    if found is None:
        return None
    for path, schedule, (profile, source) in zip(args.files, schedules, found):
        if profile.n_stages != schedule.n_stages:
            raise SchedcError(f"{path}: the schedule has {schedule.n_stages} stages but {source} beside it describes "
                              f"{profile.n_stages}; give --profile")
    return schedules, [p.executed(args.runtime) for p, _ in found], [s for _, s in found]


def gives_costs(args) -> bool:
    """Whether --profile, --costs or --comm set the costs of every CSV (else each brings its own)."""
    return bool(args.profile) or args.costs is not None or args.comm is not None


def read_with_costs(args):
    """(schedules, profiles, memory limit, sources): every CSV with the costs it brings unless the
    flags give them (:func:`read_own_costs`), else with the flags' (:func:`read_checked`); `sources`
    names the file each CSV's costs came from, None when the flags gave them."""
    schedules = read_schedules(args)  # once: validating 10**6 actions takes seconds
    own = None if gives_costs(args) else read_own_costs(args, schedules)
    if own is None:
        schedules, profiles = read_checked(args, schedules)
        return schedules, profiles, judged_memory(args), None
    schedules, profiles, sources = own
    return schedules, profiles, judged_memory(args, bytes_need_profile=False), sources  # the costs beside are in bytes


def said_once(e: SchedcError, command: str) -> SchedcError:
    """`e` without the ``COMMAND: `` head a runtime function (schedc.runtime.emulate, calibrate) puts
    before its message, which the command's own ``schedc COMMAND: error:`` already says; a program
    calling the function keeps the head, which names where the message comes from."""
    from schedc.errors import ParameterError
    from schedc.runtime.launch import LaunchError

    head = f"{command}: "
    if isinstance(e, ParameterError):
        return ParameterError(e.param, e.detail.removeprefix(head), flag=e.flag, python=e.python)
    if not str(e).startswith(head):
        return e
    if isinstance(e, LaunchError):
        return LaunchError(str(e).removeprefix(head), e.rank, e.log_tail)
    return SchedcError(str(e).removeprefix(head))


def add_gpt_args(p: argparse.ArgumentParser, with_stages: bool = True) -> None:
    # no defaults here: a flag not given is left out, so GPTConfig's (or the route's) default applies
    g = p.add_argument_group("model (schedc's built-in GPT)")
    g.add_argument("--layers", type=int, help="transformer blocks (default 4)")
    g.add_argument("--hidden", type=int, help="hidden size (default 64)")
    g.add_argument("--heads", type=int, help="attention heads (default 4)")
    g.add_argument("--seq", type=int, help="sequence length (default 32)")
    g.add_argument("--vocab", type=int, help="vocabulary size (default 256)")
    g.add_argument("--mbs", type=int, help="microbatch size: sequences per microbatch (default 4)")
    if with_stages:
        g.add_argument("--stages", type=int, help="pipeline stages to split the model into (default 2)")
    g.add_argument("--dtype", help="float32, bfloat16, float16, float64 (default float32)")
    g.add_argument("--threads", type=int, default=None,
                   help="CPU threads per process (torch.set_num_threads; default 1 on a CPU, one per rank as "
                        "schedc's local ranks run); use the same number when profiling and calibrating")


def gpt_config_from_args(args):
    """The built-in GPT of the flags given (GPTConfig's defaults for the others)."""
    from schedc.runtime.models import GPTConfig

    try:
        return GPTConfig(**given(vocab_size=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                                 seq_len=args.seq, dtype=args.dtype))
    except ValueError as e:
        raise SchedcError(f"model: {e}") from None


def require_torch(command: str) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SchedcError(f"{command} runs the model and needs torch: pip install 'schedc[torch]'") from None


def echo(text: object = "", file=None) -> None:
    """``print(text)`` with each line escaped (:func:`schedc.errors.printable`): for any output
    that carries strings from input files or arguments (a profile's model name, module names, a
    report's fields), so that a terminal escape in them is shown, not obeyed."""
    print("\n".join(printable(line) for line in str(text).split("\n")), file=file or sys.stdout, flush=True)


def warn(command: str, message: str) -> None:
    """One escaped ``schedc COMMAND: warning: ...`` line on stderr."""
    echo(f"schedc {command}: warning: {printable(message)}", file=sys.stderr)


def plural(n: int, word: str, many: str = "") -> str:
    """'1 microbatch', '16 microbatches'."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def shape(n_stages: int, n_ranks: int, n_microbatches: int, placement: str = "") -> str:
    """'4 stages on 4 ranks (loop), 8 microbatches'."""
    return (f"{plural(n_stages, 'stage')} on {plural(n_ranks, 'rank')}{f' ({placement})' if placement else ''}, "
            f"{plural(n_microbatches, 'microbatch', 'microbatches')}")


def warn_mismatches(command: str, paths, schedules, memory: MemoryLimit, profiles=None) -> None:
    """Warn on stderr when the comparison asked for is not like for like.

    - Schedules of different microbatch counts: their step times do not compare.
    - A CSV with a schedc report beside it (``NAME.json`` from ``schedc compile``) that was
      compiled for another memory limit than the one it is judged against here: its
      "fits"/"EXCEEDED" refers to the limit given here, not to the one it was built for.
    - The same for costs (`profiles`, one per CSV, as judged here): a CSV compiled for one
      model's profile and judged with another's gets another model's step time and memory.
    """
    from schedc.io import csvio

    counts = {s.n_microbatches for s in schedules}
    if len(counts) > 1:
        listed = ", ".join(f"{Path(p).name} {s.n_microbatches}" for p, s in zip(paths, schedules))
        warn(command, f"the schedules differ in microbatches ({listed}); their step times are not comparable: "
                      "compare schedules with the same --mb")
    for k, path in enumerate(paths):
        if not csvio.report_path(path).is_file():
            continue
        try:
            inputs = csvio.read_report(path).get("inputs", {})
        except SchedcError as e:
            warn(command, f"ignoring the report beside {path}: {e}")
            continue
        if not isinstance(inputs, dict):
            continue
        compiled_for = inputs.get("memory_limit")
        if isinstance(compiled_for, str) and compiled_for != str(memory):
            warn(command, f"{path} was compiled for --memory {compiled_for} but is judged against --memory {memory} "
                          f"here; pass --memory {compiled_for} to judge it by its own limit")
        difference = None if profiles is None else _costs_difference(inputs.get("costs"), profiles[k])
        if difference:
            beside = Path(path).with_suffix(".profile.json")  # schedc plan writes the costs it planned for there
            given = f"--profile {beside}" if beside.is_file() else "--profile, --costs"
            theirs = _costs_name(Profile.model_validate(inputs["costs"]))
            ours = _costs_name(profiles[k])
            names = f"of {theirs}" if theirs == ours else f"of {theirs}, not {ours}"
            warn(command, f"{path} was compiled for other costs (its report {csvio.report_path(path).name}) than "
                          f"those judged here, both {names}: {difference}; the step time and memory printed are "
                          f"not its own: pass the costs it was compiled with ({given})"
                 if theirs == ours else
                 f"{path} was compiled for the costs {names} judged here (its report "
                 f"{csvio.report_path(path).name}): {difference}; the step time and memory printed are another "
                 f"model's: pass the costs it was compiled with ({given})")


def _costs_name(profile: Profile) -> str:
    """'--costs 1,2,1' for identical stages, else the profile's model name."""
    if profile.model == "uniform":
        last = profile.stages[-1]  # stage 0 may be in torch's executed form
        return f"--costs {last.forward:g},{last.backward_input:g},{last.backward_weight:g}"
    return repr(profile.model) if profile.model else "an unnamed profile"


def _costs_difference(recorded, profile: Profile) -> str:
    """How a report's recorded costs (``inputs.costs``) differ from `profile`, compared under the
    runtime `profile` follows: the first differing stage field and how many more differ ('' when
    they are the same, or the report records none it can be judged by)."""
    if not isinstance(recorded, dict):
        return ""
    try:
        theirs = Profile.model_validate(recorded).executed(profile.runtime)
    except Exception:  # an unreadable or impossible record: nothing to compare
        return ""
    if theirs.n_stages != profile.n_stages:
        return f"{theirs.n_stages} stages there, {profile.n_stages} here"
    found = []
    for s, (a, b) in enumerate(zip(theirs.stages, profile.stages)):
        mine, other = a.model_dump(), b.model_dump()
        found += [f"stage {s} {key} {_value(mine[key])} there, {_value(other.get(key))} here"
                  for key in mine if key != "modules" and mine[key] != other.get(key)]
    if theirs.comm != profile.comm:
        found.append(f"comm {_value(theirs.comm)} there, {_value(profile.comm)} here")
    if not found:
        return ""
    return found[0] + (f" (and {len(found) - 1} more difference{'s' if len(found) > 2 else ''})"
                       if len(found) > 1 else "")


def _value(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else (f"{v}" if len(str(v)) <= 30 else f"{str(v)[:27]}...")


def model_args(pairs: list[str]) -> dict:
    """``--model-arg KEY=VALUE`` pairs (profile, calibrate) as keyword arguments; a VALUE that is a
    Python literal becomes that value, anything else stays a string."""
    import ast

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if len(pair) > MAX_MODEL_ARG:
            raise SchedcError(f"--model-arg {pair[:40]!r}...: {len(pair):,} characters, more than a model argument "
                              f"takes (at most {MAX_MODEL_ARG:,}); pass large data to the model in a file")
        if not sep or not key.isidentifier():
            raise SchedcError(f"--model-arg {pair[:80]!r}: expected KEY=VALUE, e.g. layers=8")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
        except (RecursionError, MemoryError):  # a literal nested or chained past Python's parser
            raise SchedcError(f"--model-arg {key}=...: the value is nested too deeply to read as a Python "
                              "literal; give a simpler value") from None
    return out


MAX_MODEL_ARG = 4096  # characters of one --model-arg KEY=VALUE: a model's keyword, not its data


def stopped_by(signum) -> tuple[str, int]:
    """(word, exit code) for a search that a signal ended early (schedc.solver.interrupt.received):
    SIGTERM, a batch scheduler's time limit, exits 143; Ctrl-C exits 130."""
    import signal

    return ("terminated", 143) if signum == signal.SIGTERM else ("interrupted", 130)
