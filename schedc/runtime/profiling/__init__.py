"""Measure what each pipeline stage costs on a real device: the numbers behind a profile file.

Problem: the compiler and the simulator need, per stage, the seconds of F (forward), I (backward
for inputs) and W (backward for weights), the bytes one microbatch holds after F and the bytes
still held between I and W, the static bytes (parameters, gradients, optimizer state) and the
communication time of each stage boundary. The numbers must describe what torch's
``_PipelineScheduleRuntime`` will actually execute, or the compiled order is optimized for a
different machine.

Method: every stage runs on its own sample input (the previous stage's output, detached and
requiring grad, exactly what a received activation is) the way the runtime runs it
(:mod:`.runner`: F is ``module(*inputs)`` plus ``loss_fn`` on the last stage, I
``stage_backward_input``, W ``stage_backward_weight``, B ``stage_backward`` to check I + W ~ B;
the first stage skips I and runs the whole backward in W, as ``PipelineStage.backward_one_chunk``
does). Memory comes from one untimed pass traced by the allocator (:mod:`.stage_memory`;
``activation_bytes`` is what F leaves allocated, its output included, ``weight_grad_bytes`` what
is still allocated after I, ``transient_bytes`` each action's peak above what it started and
ended with); received inputs, gradients sent back and output gradients received are the
boundary's (``boundary_bytes``); parameter gradients are static bytes (:mod:`.memory`). F, I and W
are timed inside torch's runtime itself, a one-rank schedule of all stages whose ``PP:`` spans
(:mod:`.spans`) are the samples (:mod:`.stages`); where that cannot run (under torchrun) each
round runs F, I, W back to back on the device's stream (:mod:`.timing`). Times are medians over
``repeats`` runs after ``warmup`` runs (:class:`.measurement.Measurement`; the run itself is one
:class:`schedc.core.settings.RunSettings`, recorded as ``assumes``): the ranks will run under the
same conditions as the profile, and a minimum would hide that interference rather than measure
it; a spread that makes the numbers untrustworthy, or cores oversubscribed, is a ``warning:`` note (:mod:`.noise`).
Communication is ``latency + bytes / bandwidth`` of each boundary, or a measured ping-pong
(:mod:`.comm`). Per-unit profiles (the input of ``schedc plan``) measure each unit of a model as
its own stage (:mod:`.units`). :mod:`.assemble` turns measurements into a profile
(:func:`~schedc.runtime.profiling.assemble.profile_stages`, ``profile_units``); :mod:`.gpt`
profiles the built-in GPT, in N processes at once on a CPU host with :mod:`.concurrent` (each one
:mod:`.worker`, run as ``python -m schedc.runtime.profiling.worker``).

The modules import downward in this order, so none imports the package's public entry points:
measurement, device, spans, memory, runner, timing, stage_memory, noise, comm, stages, units,
assemble, gpt, concurrent, worker (``tests/test_layers.py`` keeps the graph acyclic).

Cost: (1 + warmup + repeats) x (2 forwards + 1 split backward + 1 full backward) per stage, plus
(1 + repeats) microbatches of the whole pipeline in the runtime.
"""
