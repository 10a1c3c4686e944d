# %% [markdown]
# # 00 Setup check
#
# Run this notebook first (menu **Run → Run All Cells**). It tells you what your machine has and
# what to do if something is missing. It takes a few seconds.
#
# Each line below says **OK**, **LATER** (needed only by a later notebook, which says so) or **FAIL**; every
# FAIL comes with the command that fixes it. The same table is printed by `python3 course.py env` in a
# terminal.

# %%
# NBVAL_IGNORE_OUTPUT
from course_utils.environment import print_report, setup_notebook

device = setup_notebook(seed=0)
all_ok = print_report()

# %% [markdown]
# ## Your device
#
# Notebooks 01 to 09 and 11 to 13 run on any laptop CPU in seconds to minutes. Notebook 10 trains a tiny GPT: on a
# CPU it trains a smaller model, on a GPU (CUDA, or Apple's MPS) the full one. The cell below runs one
# matrix product on the device the course will use.

# %%
# NBVAL_IGNORE_OUTPUT
import torch

a = torch.randn(256, 256, device=device)
product = a @ a
print(f"device: {device}; a 256 x 256 matrix product gives a tensor of shape {tuple(product.shape)} "
      f"on {product.device}")

# %% [markdown]
# ## Plots
#
# You should see a small plot of the logistic curve below (the weight a softmax gives a score `x` against
# one score of 0). If you see only text like `<Figure ...>`, restart the kernel
# (**Kernel → Restart Kernel**) and run this notebook again.

# %%
import matplotlib.pyplot as plt

x = torch.linspace(-4, 4, 81)
fig, ax = plt.subplots(figsize=(4, 2.4))
ax.plot(x, torch.sigmoid(x))
ax.set_title("a plot: the logistic curve")
plt.show()

# %% [markdown]
# ## Widgets
#
# Several notebooks have interactive explorers. Move the slider below: the number next to it should
# change. If you see `IntSlider(value=3, ...)` as text instead of a slider, the widgets extension is
# missing from JupyterLab: close JupyterLab and run `python3 course.py lab` again, which installs it.

# %%
# NBVAL_IGNORE_OUTPUT
import ipywidgets as widgets

_ = widgets.interact(lambda n: print(f"{n} squared is {n * n}"), n=widgets.IntSlider(value=3, min=0, max=10))

# %% [markdown]
# ## How the exercises work
#
# Every notebook ends with exercises. Each is a function with `# YOUR CODE HERE`: write it, run the
# cell, and the check under it answers **passed**, **failed** (naming the likely mistake, such as
# "mask polarity inverted") or **not attempted**. To check all your notebooks at once, run in a
# terminal:
#
# ```
# python3 course.py check
# ```
#
# With nbval (pytest's notebook plugin; `python3 course.py test --plan` installs it), the same checks fail
# exactly the cells whose exercise is wrong, naming the mistake, and pass the rest (right or not attempted):
#
# ```
# .venv/bin/python -m pytest --nbval-lax notebooks/
# ```
#
# Stuck? The complete notebooks are in `solutions/`, beside `notebooks/` in JupyterLab's file browser.
#
# ## The course
#
# Times are reading and exercises on a laptop; every notebook runs on a CPU.
#
# | notebook | what you build | time |
# |---|---|---|
# | [01 The dot-product toy](01_dot_product_toy.ipynb) | dot products, softmax, weighted sums: attention as a soft lookup | 50 min |
# | [02 Scaled attention](02_scaled_attention.ipynb) | why 1/sqrt(head_dim): score spread, entropy, where the gradient goes; a stable softmax | 60 min |
# | [03 Masking](03_masking.ipynb) | causal and padding masks, one convention, padding left out of the loss | 60 min |
# | [04 Multi-head attention](04_multihead_einsum.ipynb) | heads as a loop, a batch and an einsum | 60 min |
# | [05 Parity with PyTorch](05_parity_with_pytorch.ipynb) | the same numbers as `nn.MultiheadAttention`; cross-attention | 65 min |
# | [06 Positional encodings](06_positional_encodings.ipynb) | learned, sinusoidal, RoPE, ALiBi; what works at longer lengths | 50 min |
# | [07 Attention variants](07_attention_variants.ipynb) | grouped-query heads, local windows, Linformer, AFT, top-k; linear attention in brief | 50 min |
# | [08 Fast attention](08_fast_attention.ipynb) | online softmax and tiled attention; attention's backward pass and FlashAttention's tiled backward | 80 min |
# | [09 Decoding](09_decoding.ipynb) | KV cache, sampling, beam search | 40 min |
# | [10 A tiny GPT](10_tiny_gpt.ipynb) | build one by hand, train it, resume it, decode it | 65 min + training |
# | [11 Inside the trained GPT](11_inside_the_gpt.ipynb) | attention maps and their limits, bertviz, rollout, sinks and norms; pre-norm vs post-norm, the FLOP count | 45 min |
# | [12 Induction heads](12_induction_heads.ipynb) | how a model learns to copy: the heads' maps and scores, the phase change, the circuit measured, a one-layer control, five seeds | 45 min |
# | [13 Linear attention as a memory](13_linear_attention.ipynb) | linear attention as a recurrence, the state's capacity, decay and gates, the delta rule, the chunkwise form | 60 min |
#
# No install at all? Each notebook also opens on a hosted service such as Google Colab, from the link in
# its first cell; its first code cell then installs the course there (and does nothing on your machine).
#
# **Next:** [01 The dot-product toy](01_dot_product_toy.ipynb).
