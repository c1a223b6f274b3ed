"""Megatron-LM launch arguments <-> parex: the same run predicts the same, both ways.

Only the analytic predictor runs here (no mesh): each prediction takes milliseconds."""

import math
import random
import re

import pytest

import parex
from parex import Layout, TrainConfig, model_preset
from parex.errors import InputError
from parex.interop import Unexpressible, from_megatron, to_megatron
from parex.interop.megatron import VERSION, known_options, megatron_options
from parex.interop.result import option_list
from parex.setting import resolve

HARDWARE = "h100-sxm"

# GPT-3 175B as Megatron-LM trains it (Narayanan et al. 2021's interleaved schedule): TP 8,
# PP 8, two virtual stages per rank, sequence parallelism, the distributed optimizer and
# selective recompute, on 128 GPUs (data-parallel size 2)
GPT3_LAUNCH = """
torchrun --nnodes 16 --nproc-per-node 8 pretrain_gpt.py \\
    --num-layers 96 --hidden-size 12288 --num-attention-heads 96 \\
    --seq-length 2048 --max-position-embeddings 2048 \\
    --tokenizer-type GPT2BPETokenizer --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt \\
    --padded-vocab-size 50304 --untie-embeddings-and-output-weights \\
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 \\
    --num-virtual-stages-per-pipeline-rank 2 \\
    --sequence-parallel --use-distributed-optimizer --recompute-activations \\
    --micro-batch-size 1 --global-batch-size 512 \\
    --bf16 --use-flash-attn \\
    --lr 6.0e-5 --min-lr 6.0e-6 --lr-decay-style cosine --train-iters 1000 \\
    --data-path my-gpt3_00_text_document --save ckpt --load ckpt --log-interval 10
"""
# the equivalent parex values: the preset, the layout with the microbatch count B / (b·dp)
GPT3_LAYOUT = "data=2,tensor=8,stage=8,virtual=2,sp=on,zero=1,microbatches=256"
GPT3_TRAIN = TrainConfig(global_batch=512, remat="selective", attention="flash")


def _record(prediction) -> dict:
    """Every number and label of a Prediction (its to_json)."""
    return prediction.to_json()


def test_a_megatron_launch_predicts_as_the_equivalent_parex_layout():
    """Issue 45's first Done-when: the GPT-3 launch above, imported, gives the very Setting
    and Prediction record of the equivalent parex values."""
    run = from_megatron(GPT3_LAUNCH, name="gpt3-175b")
    model = model_preset("gpt3-175b")
    layout = Layout.parse(GPT3_LAYOUT)
    assert run.model == model.replace(dtype="bfloat16")
    # a Megatron-LM command runs Megatron-Core's overlaps (parex.stacks): none of its three
    # overlap options is given here
    # and --bf16 reduces float32 gradients (arguments.py: no --grad-reduce-in-bf16 given)
    assert run.setting(HARDWARE) == resolve(model, GPT3_TRAIN, layout, HARDWARE,
                                            dtype="bfloat16", stack="megatron-core",
                                            recipe="mixed-fp32-grads")
    expected = parex.predict(model, GPT3_TRAIN, layout, HARDWARE, dtype="bfloat16",
                             stack="megatron-core", recipe="mixed-fp32-grads")
    assert _record(run.predict(HARDWARE)) == _record(expected)
    assert expected.n_devices == 128 and expected.step_time_s["bubble"] > 0


def test_layers_per_virtual_stage_and_stages_per_rank_are_the_same_run():
    """Megatron's two spellings of the interleaved schedule: 96 layers on 8 ranks is 12 per
    rank; 6 layers per virtual stage is 2 virtual stages per rank."""
    by_count = from_megatron(GPT3_LAUNCH, name="gpt3-175b")
    by_layers = from_megatron(GPT3_LAUNCH.replace("--num-virtual-stages-per-pipeline-rank 2",
                                                  "--num-layers-per-virtual-pipeline-stage 6"),
                              name="gpt3-175b")
    assert by_layers.layout == by_count.layout
    assert by_layers.layout.virtual_stages == 2 and by_layers.layout.schedule == "interleaved"


def test_the_import_says_what_it_ignored_and_assumed():
    run = from_megatron(GPT3_LAUNCH)
    notes = run.notes()
    assert "ignored: --vocab-file (data and tokenizer)" in notes
    assert "--lr (optimizer, schedule and numerics)" in notes
    assert f"assumed (Megatron-LM {VERSION} defaults)" in notes
    assert run.approximated == ()  # untied embeddings, as parex counts them


def test_megatron_defaults_fill_what_the_command_leaves_out():
    """No --global-batch-size: micro batch x data-parallel size; no --ffn-hidden-size: 4h, or
    with --swiglu 4h·2/3 rounded down to a multiple of 64 (validate_args' rules); GQA without
    --num-query-groups: one group."""
    run = from_megatron("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                        "--seq-length 1024 --max-position-embeddings 1024 "
                        "--padded-vocab-size 32000 --micro-batch-size 2 --swiglu "
                        "--group-query-attention --tensor-model-parallel-size 2", world_size=8)
    assert run.train.global_batch == 8 and run.layout.data == 4
    assert run.model.ffn == int(4 * 1024 * 2 / 3 / 64) * 64 == 2688
    assert run.model.kv_heads == 1 and run.model.family == "llama"
    assert run.dtype == "float32" and run.train.attention == "flash"
    assert any(a.startswith("--global-batch-size 8") for a in run.assumed)
    assert any(a.startswith("--num-query-groups 1") for a in run.assumed)


def test_vocabulary_is_padded_as_megatron_pads_it():
    """GPT-2's 50257 tokens padded to a multiple of 128 x TP; the null tokenizer adds its
    end-of-document id before padding."""
    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
            "--max-position-embeddings 128 --micro-batch-size 1 "
            "--tensor-model-parallel-size 8 ")
    assert from_megatron(base + "--tokenizer-type GPT2BPETokenizer",
                         world_size=8).model.vocab == 51200
    assert from_megatron(base + "--tokenizer-type NullTokenizer --vocab-size 32000",
                         world_size=8).model.vocab == 32768


@pytest.mark.parametrize("extra, words", [
    ("--tensor-model-parallel-sise 2", ["--tensor-model-parallel-sise", "did you mean",
                                        "'--tensor-model-parallel-size'"]),
    ("--bf16 --fp16", ["--bf16 and --fp16 contradict", "give one precision"]),
    ("--recompute-activations --recompute-granularity full",
     ["contradict", "give one of them"]),
    ("--num-query-groups 8", ["--num-query-groups without --group-query-attention"]),
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 "
     "--num-virtual-stages-per-pipeline-rank 2", ["contradict"]),
    ("--multi-latent-attention", ["parex cannot predict multi-latent attention"]),
    ("--recompute-granularity full --recompute-method block --recompute-num-layers 2",
     ["--recompute-method uniform --recompute-num-layers 1"]),
    ("--tensor-model-parallel-size 3", ["world size 8", "not divisible by 3"]),
    ("--num-layers 3", ["--num-layers is given twice"]),
])
def test_unknown_or_contradictory_options_are_one_line_errors(extra, words):
    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
            "--max-position-embeddings 128 --padded-vocab-size 512 --micro-batch-size 1 ")
    with pytest.raises(InputError) as err:
        from_megatron(base + extra, world_size=8)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_a_command_without_a_world_size_says_how_to_give_one():
    with pytest.raises(InputError, match="the world size"):
        from_megatron("--num-layers 2")
    with pytest.raises(InputError, match="contradicts torchrun's 128"):
        from_megatron(GPT3_LAUNCH, world_size=64)


# --- export, and round trips ------------------------------------------------------------------

def _random_run(rng: random.Random):
    """A model, train config and layout Megatron-LM can express (every option exported)."""
    tensor = rng.choice([1, 2, 4, 8])
    stage = rng.choice([1, 1, 2, 4])
    virtual = rng.choice([1, 2]) if stage > 1 else 1
    seq = rng.choice([1, 1, 2])
    family = rng.choice(["gpt", "llama"])
    heads = 8 * rng.choice([1, 2, 4])
    hidden = heads * rng.choice([64, 128])
    kv = rng.choice([heads, 8]) if family == "llama" else heads
    layers = stage * virtual * rng.choice([1, 2, 3])
    moe = family == "llama" and rng.random() < 0.2
    model = parex.ModelConfig(
        f"random-{family}", family, layers, hidden, heads, kv,
        ffn=rng.choice([4 * hidden, 2 * hidden + 256 * tensor]),
        vocab=1024 * tensor * rng.choice([8, 32]), seq_len=rng.choice([1024, 2048, 4096]),
        experts=8 if moe else 0, top_k=2 if moe else 1)
    data = rng.choice([1, 2, 4])
    fsdp = 1
    if rng.random() < 0.15:  # torch FSDP2: every data-parallel rank shards
        data, fsdp = 1, rng.choice([2, 4])
    expert = 2 if moe and data % 2 == 0 else 1
    data //= expert
    zero = 0 if fsdp > 1 else rng.choice([0, 1, 1, 2, 3])
    layout = Layout(data=data, fsdp=fsdp, expert=expert, tensor=tensor, seq=seq, stage=stage,
                    virtual_stages=virtual, zero=zero, sp=tensor > 1 and rng.random() < 0.6,
                    cp=rng.choice(["ring", "ulysses"]) if seq > 1 else "none",
                    schedule=(None if stage == 1 else
                              "interleaved" if virtual > 1 else rng.choice([None, "1f1b"])))
    b = rng.choice([1, 2])
    m = rng.choice([1, 2, 4, 8]) if stage == 1 else stage * rng.choice([1, 2, 4])
    train = TrainConfig(global_batch=b * m * layout.data_parallel,
                        microbatch=b if m == 1 else None,
                        remat=rng.choice(["none", "selective", "full"]),
                        attention=rng.choice(["flash", "naive"]))
    layout = layout.replace(microbatches=m)
    dtype = rng.choice(["bfloat16", "bfloat16", "float32"])
    return model, train, layout, dtype


def test_export_then_import_gives_the_same_setting_and_prediction_for_random_layouts():
    """Round trips are exact over 60 random layouts Megatron-LM can express: the emitted
    command, imported, resolves to the Setting parex.predict resolves for the original (under
    Megatron-Core's stack) and predicts the same record (the model named alike)."""
    rng = random.Random(45)
    compared = 0
    for _ in range(60):
        model, train, layout, dtype = _random_run(rng)
        # what a Megatron-LM command runs (parex.stacks), and the recipe its precision states:
        # --bf16 reduces float32 gradients unless --grad-reduce-in-bf16
        keywords = {"dtype": dtype, "stack": "megatron-core", "recipe": None if dtype ==
                    "float32" else rng.choice(["mixed", "mixed-fp32-grads"])}
        original = resolve(model, train, layout, HARDWARE, **keywords)
        command = to_megatron(model, train, layout, HARDWARE, **keywords)
        run = from_megatron(command, name=model.name)
        assert run.setting(HARDWARE) == original, command
        try:
            expected = parex.predict(model, train, layout, HARDWARE, **keywords)
        except parex.LayoutError as err:  # parex itself refuses it: so must the import
            with pytest.raises(parex.LayoutError, match=re.escape(str(err)[:40])):
                run.predict(HARDWARE)
            continue
        assert _record(run.predict(HARDWARE)) == _record(expected), command
        compared += 1
    assert compared >= 50


@pytest.mark.parametrize("layout, nearest", [
    ("data=2,tensor=2x2x2", "tensor=8 (a 1D split)"),
    ("data=2,stage=4,schedule=zbv,virtual=2,microbatches=8", "schedule=interleaved,virtual=2"),
    ("data=2,stage=4,schedule=gpipe,microbatches=8", "schedule=1f1b"),
    ("data=2,stage=4,schedule=zbh1,microbatches=8", "schedule=1f1b"),
    ("data=2,fsdp=4", "fsdp=8 alone"),
    ("data=4,replica=2,inner_steps=10", "data=8 without replica"),
    ("data=2,stage=2,partition=3:1,microbatches=4", "the even split"),
])
def test_what_megatron_cannot_express_is_refused_naming_the_nearest(layout, nearest):
    model = model_preset("llama2-7b").replace(layers=4)
    with pytest.raises(Unexpressible) as err:
        to_megatron(model, TrainConfig(global_batch=64), Layout.parse(layout), HARDWARE)
    message = str(err.value)
    assert message.startswith("Megatron-LM cannot express") and "\n" not in message
    assert f"the nearest it can: {nearest}" in message


def test_emitted_option_names_are_megatron_options_of_the_named_version():
    """Every option the export writes is in Megatron-LM's own list (read from
    megatron/training/arguments.py at the tag the list names)."""
    listed = option_list("megatron-lm")
    assert listed["version"] == VERSION
    assert listed["source"].startswith("https://github.com/NVIDIA/Megatron-LM/blob/" + VERSION)
    known = known_options()
    assert len(known) > 500
    rng = random.Random(7)
    emitted = set()
    for _ in range(30):
        model, train, layout, dtype = _random_run(rng)
        words = megatron_options(resolve(model, train, layout, HARDWARE, dtype=dtype))
        emitted |= {w for w in words if w.startswith("--")}
    assert emitted and emitted <= set(known), emitted - set(known)
    # the options that carry each layout field all appeared among the 30
    for option in ("--tensor-model-parallel-size", "--num-virtual-stages-per-pipeline-rank",
                   "--context-parallel-size", "--use-distributed-optimizer",
                   "--sequence-parallel", "--recompute-activations", "--bf16"):
        assert option in emitted


def test_the_three_overlap_options_import_onto_megatron_cores_stack_and_back():
    words = " --sequence-parallel --tp-comm-overlap --overlap-grad-reduce --overlap-param-gather"
    run = from_megatron(GPT3_LAUNCH.replace(" --sequence-parallel", words))
    assert run.stack == "megatron-core"
    assert set(run.overlaps) == {"tp-backward", "tp-comm", "grad-reduce", "param-gather"}
    p = run.predict(HARDWARE)
    assert set(p.overlaps) == {"tp-comm", "grad-reduce", "param-gather", "links"}
    assert all(part["exposed"] < part["comm"] for part in p.overlaps.values())
    assert not any(o.startswith(("--tp-comm", "--overlap")) for o in run.ignored)
    back = megatron_options(run.setting(HARDWARE))
    assert {"--tp-comm-overlap", "--overlap-grad-reduce", "--overlap-param-gather"} <= set(back)


@pytest.mark.parametrize("drop, add, needs", [
    ("--sequence-parallel", "--tp-comm-overlap", "--tp-comm-overlap needs --sequence-parallel"),
    ("--use-distributed-optimizer", "--overlap-param-gather --overlap-grad-reduce",
     "--overlap-param-gather needs --use-distributed-optimizer"),
    ("", "--overlap-param-gather", "--overlap-param-gather needs --overlap-grad-reduce")])
def test_overlap_options_megatron_refuses_are_refused(drop, add, needs):
    command = GPT3_LAUNCH.replace(drop, "") if drop else GPT3_LAUNCH
    with pytest.raises(InputError, match=needs):
        from_megatron(command + " " + add)


def test_head_width_and_tied_tables_are_read_and_written():
    """--kv-channels names the head width; without --untie-embeddings-and-output-weights the
    table is tied (Megatron-LM's default). Both round-trip through the exported command."""
    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
            "--max-position-embeddings 128 --padded-vocab-size 512 --micro-batch-size 1 "
            "--global-batch-size 8 --kv-channels 128")
    run = from_megatron(base, world_size=8)
    assert run.model.head_dim == 128 and run.model.tied_embeddings and run.approximated == ()
    again = from_megatron(to_megatron(run.model, run.train, run.layout, "h100-sxm"),
                          world_size=8, name=run.model.name)
    assert again.model.replace(dtype=run.model.dtype) == run.model  # the export writes --bf16


def test_any_data_parallel_size_is_predicted_with_the_padded_distributed_optimizer():
    """--use-distributed-optimizer over 6 ranks, whose D = 256 they do not divide: a real
    Megatron-LM run, predicted (each rank ⌈N/6⌉ of the flat buffer)."""
    run = from_megatron("--num-layers 2 --hidden-size 256 --num-attention-heads 4 "
                        "--seq-length 128 --max-position-embeddings 128 --padded-vocab-size 512 "
                        "--micro-batch-size 1 --global-batch-size 6 "
                        "--untie-embeddings-and-output-weights --use-distributed-optimizer",
                        world_size=6)
    assert run.layout.zero == 1 and run.layout.data == 6
    padded = run.predict("h100-sxm").memory_bytes_per_device["optimizer"]
    # float32 training: Adam's two moments, 8 bytes a parameter, and its 8 bytes of counters
    assert padded == math.ceil(run.model.n_params / 6) * 8 + 8


def test_moe_parallel_folding_round_trips_as_expert_tensor_parallel_size_1():
    """MoE parallel folding (issue 43): parex's expert=4,tensor=2,expert_tensor=1 is Megatron's
    TP 2, EP 8, ETP 1 (the expert group over all 8 ranks), and reads back to the same Setting;
    an ETP that folds part of the tensor ranks is refused in one line."""
    model = parex.model_preset("tiny-moe")
    train = TrainConfig(global_batch=16, microbatch=4)  # b = 16 / data-parallel 4
    layout = Layout.parse("expert=4,tensor=2,expert_tensor=1,sp=on")
    command = to_megatron(model, train, layout, HARDWARE)
    assert "--expert-model-parallel-size 8" in command
    assert "--expert-tensor-parallel-size 1" in command
    setting = from_megatron(command, name=model.name).setting(HARDWARE)
    expected = resolve(model, train, layout, HARDWARE)
    assert (setting.layout, setting.train, setting.model) == (expected.layout, expected.train,
                                                              expected.model)
    with pytest.raises(parex.InputError, match="--expert-tensor-parallel-size 2: parex folds"):
        from_megatron(command.replace("--tensor-model-parallel-size 2",
                                      "--tensor-model-parallel-size 4")
                      .replace("--expert-tensor-parallel-size 1",
                               "--expert-tensor-parallel-size 2"),
                      name=model.name)


def test_the_expert_all_to_all_overlap_imports_and_goes_back():
    """--overlap-moe-expert-parallel-comm: the expert all-to-all beside another microbatch's
    compute (parex.predict.overlap.paired), on a mixture of experts with expert parallelism."""
    moe = (" --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2"
           " --overlap-moe-expert-parallel-comm")
    run = from_megatron(GPT3_LAUNCH.replace(" --sequence-parallel", " --sequence-parallel" + moe))
    assert "moe-a2a" in run.overlaps
    p = run.predict(HARDWARE)
    assert 0 < p.overlaps["moe-a2a"]["exposed"] < p.overlaps["moe-a2a"]["comm"]
    assert "--overlap-moe-expert-parallel-comm" in megatron_options(run.setting(HARDWARE))


def test_the_flex_dispatcher_imports_as_deepep_and_goes_back():
    """--moe-token-dispatcher-type flex (DeepEP or HybridEP: a token sent once per remote node)
    is parex's `deepep`; any other dispatcher is priced as the all-to-all, and the export writes
    the one parex priced."""
    moe = " --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2"
    launch = GPT3_LAUNCH.replace(" --sequence-parallel", " --sequence-parallel" + moe)
    for extra in (" --moe-token-dispatcher-type flex --moe-enable-deepep",
                  " --moe-token-dispatcher-type flex"):
        run = from_megatron(launch + extra)
        assert "deepep" in run.overlaps
        assert not [note for note in run.ignored if "dispatcher" in note or "deepep" in note]
        words = megatron_options(run.setting(HARDWARE))
        assert " ".join(words).count("--moe-token-dispatcher-type flex --moe-enable-deepep") == 1
    plain = from_megatron(launch + " --moe-token-dispatcher-type alltoall")
    assert "deepep" not in plain.overlaps and not plain.approximated
    assert "--moe-token-dispatcher-type alltoall" in " ".join(
        megatron_options(plain.setting(HARDWARE)))
    gathered = from_megatron(launch)  # Megatron-Core's default: allgather
    assert any("allgather" in note for note in gathered.approximated)


@pytest.mark.parametrize("options, recipe", [
    ("--bf16", "mixed-fp32-grads"), ("--bf16 --grad-reduce-in-bf16", "mixed"),
    ("--bf16 --main-grads-dtype bf16", "mixed"), ("--fp16", "mixed"),
    ("--fp16 --accumulate-allreduce-grads-in-fp32", "mixed-fp32-grads"), ("", "parex")])
def test_the_gradients_are_reduced_in_the_precision_megatron_lm_reduces_them(options, recipe):
    """arguments.py (core_v0.15.0): --bf16 sets accumulate_allreduce_grads_in_fp32 unless
    --grad-reduce-in-bf16 or 16-bit main gradients; --fp16 only when asked. The float32
    reduction doubles the gradient all-reduce's bytes and the gradients' memory."""
    command = GPT3_LAUNCH.replace(" --bf16", "") + " " + options
    run = from_megatron(command, name="gpt3-175b")
    setting = run.setting(HARDWARE)
    assert setting.recipe == recipe
    assert not any(o.startswith(("--grad-reduce", "--main-grads", "--accumulate"))
                   for o in run.ignored)
    if recipe == "parex":
        return
    back = megatron_options(setting)
    assert ("--grad-reduce-in-bf16" in back) == (recipe == "mixed")
    assert from_megatron(" ".join(back), world_size=128).recipe == recipe
