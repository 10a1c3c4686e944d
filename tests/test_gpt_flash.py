"""The tiny GPT with ``attention="flash"`` (notebook 08's flash_attention): it trains like the default attention,
refuses the dropout it cannot do, and its checkpoints (and old ones without the choice) load."""

from __future__ import annotations

import pytest
import torch
from strategies import practice_text

from course_utils.gpt import GPT, GPTConfig
from course_utils.train import TrainConfig, load_model, train

pytestmark = pytest.mark.usefixtures("one_thread")


def _losses(attention: str, steps: int = 20, **overrides) -> list[float]:
    """``steps`` AdamW steps in float64 from the same initial weights, on counting sequences (learnable)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", attention=attention, **overrides)).double().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        idx = (torch.randint(65, (4, 1), generator=g) + torch.arange(33)) % 65  # (B, T + 1): t, t + 1, ...
        _, loss = model(idx[:, :-1], idx[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("overrides", [{}, {"positions": "rope"}, {"norm_position": "post"}])
def test_twenty_float64_training_steps_with_flash_attention_match_the_default(overrides):
    flash, default = _losses("flash", **overrides), _losses(GPTConfig().attention, **overrides)
    assert default[-1] < default[0] - 0.1  # it learned something, so the two paths really moved
    torch.testing.assert_close(torch.tensor(flash), torch.tensor(default), atol=1e-8, rtol=0)


def test_flash_attention_in_the_model_with_a_cache_gives_the_same_logits():
    """Decoding with a KV cache: T < S, the causal triangle aligned bottom-right as in the other paths."""
    torch.manual_seed(0)
    flash = GPT(GPTConfig.preset("tiny", attention="flash")).double().eval()
    default = GPT(GPTConfig.preset("tiny")).double().eval()
    default.load_state_dict(flash.state_dict())
    idx = torch.randint(65, (2, 12), generator=torch.Generator().manual_seed(2))
    for model in (flash, default):
        cache = model.new_cache()
        model(idx[:, :7], cache=cache)
        model.logits = model(idx[:, 7:], cache=cache)[0]  # (B, 5, V), queries 7..11 against keys 0..11
    torch.testing.assert_close(flash.logits, default.logits, atol=1e-12, rtol=0)


def test_flash_attention_refuses_dropout_it_cannot_do():
    with pytest.raises(ValueError, match=r"attention='flash' has no dropout on the attention weights, got dropout=0.2"):
        GPTConfig.preset("gpu", attention="flash")
    assert GPTConfig.preset("gpu", attention="flash", dropout=0.0).attention == "flash"


def test_checkpoints_keep_the_flash_choice_and_old_ones_without_it_load(tmp_path):
    data = tmp_path / "text.txt"
    data.write_text(practice_text(200))
    settings = TrainConfig(batch_size=4, max_steps=2, eval_interval=2, eval_batches=1, warmup_steps=1)
    train(GPTConfig.preset("tiny", attention="flash"), data, tmp_path / "run", settings)
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    train(GPTConfig.preset("tiny", attention="flash"), data, tmp_path / "run", settings, resume=True, max_steps=3)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert state["step"] == 3  # the flash run resumed
    model, _, _ = load_model(checkpoint)
    assert model.config.attention == "flash"
    del state["model_config"]["attention"]  # a checkpoint written before the field existed
    torch.save(state, tmp_path / "old.pt")
    old, _, _ = load_model(tmp_path / "old.pt")
    assert old.config.attention == GPTConfig().attention
    x = torch.randint(old.config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(old(x)[0], model(x)[0])
