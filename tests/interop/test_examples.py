"""Examples from the wild: the frameworks' own published launch configurations, imported and
predicted. The options are transcribed from the files named (their values; paths and
environment variables written out), at the versions the importers read."""

import parex
from parex import Layout
from parex.errors import InputError
from parex.interop import from_megatron, from_torchtitan

import pytest

HARDWARE = "h100-sxm"

# Megatron-LM core_v0.15.0, examples/gpt3/train_gpt3_175b_distributed.sh, with NUM_NODES=16
# (its TP 8 x PP 16 needs 128 GPUs) and its shell variables written out
MEGATRON_GPT3_175B = """
torchrun --nproc_per_node 8 --nnodes 16 --master_addr localhost --master_port 6000 \\
    pretrain_gpt.py \\
    --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 \\
    --max-position-embeddings 2048 --attention-backend auto \\
    --micro-batch-size 1 --global-batch-size 1536 --rampup-batch-size 16 16 5859375 \\
    --train-iters 500000 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 \\
    --init-method-std 0.006 --clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine \\
    --min-lr 6.0e-6 --lr-warmup-fraction .001 --lr-decay-iters 430000 \\
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 \\
    --data-path /data/gpt3_text_document --vocab-file gpt2-vocab.json \\
    --merge-file gpt2-merges.txt --split 949,50,1 \\
    --log-interval 100 --save-interval 10000 --eval-interval 1000 --save /ckpt --load /ckpt \\
    --eval-iters 10 --tensorboard-dir /tb
"""

# torchtitan v0.2.2, torchtitan/models/llama3/train_configs/llama3_8b.toml: the keys that set
# the step (its other keys are logging, checkpointing and data), on the 64 A100s its note names
TORCHTITAN_LLAMA3_8B = """
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 1
seq_len = 8192
max_norm = 1.0
steps = 1000
dataset = "c4"
[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 1
context_parallel_degree = 1
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
[compile]
enable = false
"""


def test_megatrons_gpt3_example_needs_its_tokenizer_named():
    """The example names no --tokenizer-type (Megatron-LM core_v0.15.0 has no default): the
    import says which to add rather than guessing."""
    with pytest.raises(InputError, match="add --tokenizer-type GPT2BPETokenizer"):
        from_megatron(MEGATRON_GPT3_175B)


def test_megatrons_gpt3_example_predicts():
    run = from_megatron(MEGATRON_GPT3_175B + " --tokenizer-type GPT2BPETokenizer",
                        name="gpt3-175b")
    assert run.layout == Layout.parse("tensor=8,stage=16,schedule=1f1b,microbatches=1536")
    assert run.model.vocab == 51200 and run.model.layers == 96 and run.dtype == "bfloat16"
    approximated = " ".join(run.approximated)
    assert "--fp16 predicted as bfloat16" in approximated
    assert "--rampup-batch-size" in approximated
    assert run.model.tied_embeddings  # Megatron-LM's default: no --untie-embeddings-...
    assert "--lr-warmup-fraction (optimizer, schedule and numerics)" in run.ignored
    p = run.predict(HARDWARE)
    assert p.n_devices == 128 and p.step_time_s["bubble"] > 0


def test_torchtitans_llama3_8b_example_predicts_as_the_preset_under_fsdp():
    run = from_torchtitan(TORCHTITAN_LLAMA3_8B, world_size=64, name="llama3-8b")
    assert run.model == parex.model_preset("llama3-8b").replace(dtype="bfloat16")
    assert run.layout == Layout.parse("fsdp=64")
    assert run.train.global_batch == 64 and run.train.remat == "selective"
    assert run.predict("a100-80gb").n_devices == 64
