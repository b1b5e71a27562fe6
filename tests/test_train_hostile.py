"""examples/train.py's stage counts that contradict each other: one line naming the flag before any
process group starts (after it, they named load_pipeline's parameters on every rank, or --stages
was silently not what torch's class built)."""

import importlib.util

import pytest

pytest.importorskip("torch")

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402
from schedc.runtime.launch import ROOT  # noqa: E402


@pytest.fixture
def train(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("_train_example", ROOT / "examples" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for var in ("RANK", "MASTER_ADDR", "MASTER_PORT"):  # not under torchrun: nothing can start
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.chdir(tmp_path)
    write_csv(make_baseline("1f1b", 2, 4), tmp_path / "s.csv")
    return module


@pytest.mark.parametrize("argv, needle", [
    (["--schedule", "s.csv", "--layers-per-stage", "1,1"], "--layers-per-stage 1,1: 2 blocks but the model has 8"),
    (["--schedule", "s.csv", "--layers", "4", "--layers-per-stage", "1,1,2"],
     "--layers-per-stage 1,1,2: 3 counts for the 2 stages of s.csv"),
    (["--torch-schedule", "Interleaved1F1B", "--stages", "3"], "--stages 3: torch's Interleaved1F1B runs as many"),
    (["--torch-schedule", "1F1B", "--stages", "4"], "--stages 4: torch's 1F1B runs one stage per rank (2)"),
])
def test_contradicting_stage_counts_are_one_line_before_the_group(train, capsys, argv, needle):
    assert train.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {needle}"), err


def test_load_torch_pipeline_refuses_stages_per_rank_a_single_stage_class_cannot_build():
    import torch.distributed as dist

    from schedc.errors import SchedcError
    from schedc.runtime import GPT, GPTConfig, lm_loss, load_torch_pipeline
    from _dist import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        model = GPT(GPTConfig(vocab_size=16, hidden=8, layers=2, heads=2, seq_len=4))
        with pytest.raises(SchedcError, match=r"^stages_per_rank: ScheduleGPipe runs one stage per rank, got 2"):
            load_torch_pipeline("GPipe", model, lm_loss, 2, stages_per_rank=2)
    finally:
        dist.destroy_process_group()
