"""course_utils.block: the one transformer block, around whatever attention a model uses."""

import torch
from strategies import refusals_test

from course_utils.block import MLP, Block
from course_utils.gpt import GPT, GPTConfig
from course_utils.length_generalisation import LengthGenConfig, TinyPositionalModel
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention
from course_utils.variants import GroupedQueryAttention


def test_pre_norm_and_post_norm_blocks_by_hand():
    torch.manual_seed(0)
    x, mask = torch.randn(2, 5, 16, dtype=torch.float64), causal_mask(5)
    pre, post = (Block(16, MultiHeadAttention(16, 4), norm_position=p).double() for p in ("pre", "post"))
    with torch.no_grad():  # fresh layer norms are all alike (weight 1, bias 0): a swapped one would pass unseen
        for p in (*pre.parameters(), *post.parameters()):
            p.add_(0.1 * torch.randn_like(p))
    h = x + pre.attn(pre.ln_1(x), mask)
    torch.testing.assert_close(pre(x, mask), h + pre.mlp(pre.ln_2(h)))
    h = post.ln_1(x + post.attn(x, mask))
    torch.testing.assert_close(post(x, mask), post.ln_2(h + post.mlp(h)))


def test_every_model_uses_the_one_block_with_the_same_parameter_names():
    models = [
        GPT(GPTConfig.preset("tiny")),
        TinyPositionalModel(LengthGenConfig.tiny(), "rope"),
    ]
    for model in models:
        assert all(isinstance(b, Block) and isinstance(b.mlp, MLP) for b in model.blocks)
        names = {name.split(".")[0] for name in model.blocks[0].state_dict()}
        assert names == {"ln_1", "attn", "ln_2", "mlp"}, type(model).__name__
    assert isinstance(models[0].blocks[0].attn, GroupedQueryAttention)


def test_mlp_shapes_and_ratio():
    mlp = MLP(8, mlp_ratio=3, bias=False)
    assert mlp.fc_in.weight.shape == (24, 8) and mlp.fc_in.bias is None
    assert mlp(torch.randn(2, 3, 8)).shape == (2, 3, 8)


# (call, exception type, a pattern the message must match): the messages tests/bad_inputs.json does not pin already
MESSAGES = [
    (
        lambda: Block(16, MultiHeadAttention(16, 4), norm_position="sandwich"),
        ValueError,
        r"norm_position must be one of \('pre', 'post'\), got 'sandwich'",
    ),
    (lambda: MLP(8, dropout=1.0), ValueError, r"dropout must be in \[0, 1\), got 1.0"),
    (
        lambda: Block(16, MultiHeadAttention(16, 4))(torch.randn(2, 5, 8)),
        ValueError,
        r"x must have shape \(B, T, C=16\), got \(2, 5, 8\)",
    ),
    (
        lambda: Block(8, MultiHeadAttention(8, 2))(torch.randn(1, 3, 8), need_weights=True),
        TypeError,
        r"for the attention weights call block.attend\(x, need_weights=True\)",
    ),
]
test_each_bad_input_gets_its_message = refusals_test(MESSAGES, regex=True)
