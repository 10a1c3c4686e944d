"""Reference implementation for the course *Attention, Step by Step*.

Every idea a notebook derives inline is written once here, tested against PyTorch's own
implementation, and imported by the notebooks that come after.

Glossary (one name per concept; PyTorch's names win)
----------------------------------------------------
embed_dim       model width; also called d_model or n_embd elsewhere
num_heads       number of attention heads
head_dim        width of one head, embed_dim // num_heads
context_length  the longest sequence the model sees; block_size in nanoGPT
vocab_size      number of distinct tokens
q, k, v         queries, keys, values
scores          q @ k^T (scaled), before the softmax
weights         softmax(scores), the attention weights; each row sums to 1
out             weights @ v, the attention output
mask            boolean, True = may attend (as F.scaled_dot_product_attention reads it)
max_steps       optimizer steps of a training run; max_iters in nanoGPT
learning_rate   the optimizer's (peak) step size; lr in PyTorch's optimizers
batch_size      sequences per training step; eval_batch_size per evaluation batch
eval_batches    how many batches an evaluation averages over; eval_iters in nanoGPT

Shape alphabet (declared once, never overloaded)
------------------------------------------------
B batch   T query length   S key length   C embed_dim
H num_heads   D head_dim   V vocab_size
Einsum letters are the same in lower case, with i, j for query and key positions:
``torch.einsum("bhid,bhjd->bhij", q, k)``.

Modules, in reading order (README's notebook table says which notebook uses each): ``attention``, ``masking``,
``multihead``, ``positional``, ``length_generalisation``, ``variants``, ``fast_attention``, ``generation``, ``data``,
``gpt``, ``train``, ``runs``, ``attention_view``, ``inspect_gpt``, ``induction``, ``linear_attention``; beside them
``block`` (the transformer block of 06-11), ``train_cli`` (``python -m course_utils.train`` and ``torchrun``),
``plotting`` and ``widgets`` (pictures and explorers), ``exercises`` and ``exercises._engine`` (every exercise's
checks), ``devices`` (where tensors go), ``environment`` (the setup check), ``_validate`` and ``_files`` (argument
checks, atomic writes), ``_start`` (how a training command stops, in one line), ``_corpus`` (makes the corpus of 10
and 11); ``static/vendor`` holds the JavaScript that ``attention_view`` inlines, so that bertviz's views work offline.

The course's tooling (building the notebooks, grading, resets, workshop rooms, the static site, vendoring,
making the corpus) is the package ``course_tools`` beside this one: a learner never needs to import it.
"""

__version__ = "0.1.0"
