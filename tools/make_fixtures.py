#!/usr/bin/env python3
"""Writes the Qwen3-TTS (12 Hz) parity fixtures under tests/fixtures/qwen3tts/.

Run with the pinned reference environment (qwen-tts 0.1.1, transformers 4.57.3, torch on CPU):

    /work/refenv/bin/python tools/make_fixtures.py [--out tests/fixtures/qwen3tts]

For each case it builds a tiny random-weight model with the reference's own classes, writes it as a
checkpoint in the official Hugging Face layout (config.json, generation_config.json, safetensors weights,
text tokenizer files, speech_tokenizer/), loads that folder back with the official loader, and writes
what the reloaded model computes (float32) into <case>/expected/. The output is deterministic: every
random draw comes from a fixed torch seed, and the prompts are fixed.

The heads are fitted to the model's own greedy decisions (fit_heads): every decision on the fixture prompts
wins by at least 0.118 of max|logit| in tiny06 and 0.111 in tiny17 (RECORDED_MIN_MARGIN), where the bf16
CUDA Talker's logits were measured within 0.008 of max|logit| (docs/benchmarks.md), so bf16 cannot flip them;
the script checks it with the reference itself in bf16 (check_bf16: every prompt's codes, all frames).
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

PINNED = {"qwen-tts": "0.1.1", "transformers": "4.57.3"}


def check_versions():
    from importlib.metadata import version
    for package, wanted in PINNED.items():
        found = version(package)
        if found != wanted:
            sys.exit(f"make_fixtures.py: {package} {found} is installed, the fixtures are pinned to {wanted}; "
                     f"run it with /work/refenv/bin/python (or pip install {package}=={wanted})")


check_versions()

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig  # noqa: E402
from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration  # noqa: E402
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config  # noqa: E402
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model  # noqa: E402
from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel  # noqa: E402

NUM_CODE_GROUPS = 16  # the 12 Hz codec has 16 quantizers: one Talker code and 15 predictor codes a frame
CONTROL_SPAN = 1024  # the reference suppresses ids from vocab_size - 1024 up (control tokens), except the end


# ---------------------------------------------------------------------------------------------------------
# The text tokenizer: a tiny byte-level BPE with the Qwen chat and TTS special tokens.

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
                  "<tts_text_bos_single>"]
BPE_CORPUS = [
    "assistant", "user", "system", "Hello world, this is a test of speech.",
    "The quick brown fox jumps over the lazy dog.", "A warm, calm voice that speaks slowly.",
    "Speak with a bright and cheerful tone!", "Numbers like 12 and 2026 are read aloud.",
    "Guten Tag, wie geht es dir?", "Bonjour tout le monde.", "你好，世界。今天天气很好。",
]


def write_text_tokenizer(folder: Path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    corpus = BPE_CORPUS * 8 + ["assistant\n"] * 50
    tok.train_from_iterator(corpus, trainer=trainer)
    with tempfile.TemporaryDirectory() as scratch:
        tok.model.save(scratch)
        fast = Qwen2TokenizerFast(vocab_file=os.path.join(scratch, "vocab.json"),
                                  merges_file=os.path.join(scratch, "merges.txt"),
                                  unk_token=None, bos_token=None, eos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    fast.model_max_length = 32768
    fast.save_pretrained(str(folder))
    # The released checkpoints carry vocab.json + merges.txt (no tokenizer.json): the loader then builds
    # the fast tokenizer from them, as it does for the real models.
    for extra in ("tokenizer.json",):
        (folder / extra).unlink(missing_ok=True)
    ids = {t: fast.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    return ids, len(fast)


# ---------------------------------------------------------------------------------------------------------
# Configurations. Widths are tiny; every structural feature of the released models is kept.

def control_ids(codebook):
    # Same offsets from the codebook as the released 12 Hz configs (pad 2148 = 2048 + 100, ...).
    return {
        "codec_pad_id": codebook + 100, "codec_bos_id": codebook + 101, "codec_eos_token_id": codebook + 102,
        "codec_think_id": codebook + 106, "codec_nothink_id": codebook + 107,
        "codec_think_bos_id": codebook + 108, "codec_think_eos_id": codebook + 109,
    }


def talker_config(case, codebook, text_vocab):
    languages = {"english": codebook + 2, "german": codebook + 3, "chinese": codebook + 7,
                 "beijing_dialect": codebook + 12, "sichuan_dialect": codebook + 13}
    cfg = dict(
        vocab_size=codebook + CONTROL_SPAN, text_vocab_size=text_vocab, num_code_groups=NUM_CODE_GROUPS,
        hidden_act="silu", max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000,
        attention_bias=False, use_sliding_window=False, tie_word_embeddings=False,
        codec_language_id=languages, position_id_per_seconds=13, **control_ids(codebook))
    if case == "tiny06":
        cfg.update(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, text_hidden_size=96,
                   rope_scaling={"interleaved": True, "mrope_section": [6, 5, 5], "rope_type": "default",
                                 "type": "default"},
                   spk_id={"vivian": codebook + 600, "dylan": codebook + 700},
                   spk_is_dialect={"vivian": False, "dylan": "beijing_dialect"})
        predictor = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=32)
    else:
        cfg.update(hidden_size=96, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, text_hidden_size=96,
                   rope_scaling={"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default",
                                 "type": "default"},
                   spk_id={}, spk_is_dialect={})
        predictor = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16)
    predictor.update(vocab_size=codebook, num_code_groups=NUM_CODE_GROUPS, hidden_act="silu",
                     max_position_embeddings=65536, rms_norm_eps=1e-6, rope_theta=1000000, attention_bias=False,
                     use_sliding_window=False, max_window_layers=28, tie_word_embeddings=False,
                     layer_types=["full_attention"] * predictor["num_hidden_layers"])
    cfg["code_predictor_config"] = predictor
    return cfg


def model_config(case, codebook, text_ids, text_vocab):
    return Qwen3TTSConfig(
        talker_config=talker_config(case, codebook, text_vocab),
        # The released checkpoints carry only these two fields here; see write_main_config.
        speaker_encoder_config={"enc_dim": 64, "sample_rate": 24000},
        tokenizer_type="qwen3_tts_tokenizer_12hz",
        tts_model_size="0b6" if case == "tiny06" else "1b7",
        tts_model_type="custom_voice" if case == "tiny06" else "voice_design",
        im_start_token_id=text_ids["<|im_start|>"], im_end_token_id=text_ids["<|im_end|>"],
        tts_pad_token_id=text_ids["<tts_pad>"], tts_bos_token_id=text_ids["<tts_text_bos>"],
        tts_eos_token_id=text_ids["<tts_text_eod>"],
        architectures=["Qwen3TTSForConditionalGeneration"])


def codec_config(case, codebook):
    if case == "tiny06":
        decoder = dict(codebook_dim=16, latent_dim=32, hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
                       head_dim=8, intermediate_size=64, num_hidden_layers=2, sliding_window=4, decoder_dim=32,
                       upsample_rates=[2, 2], upsampling_ratios=[2])
    else:
        decoder = dict(codebook_dim=16, latent_dim=24, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=8, intermediate_size=48, num_hidden_layers=2, sliding_window=4, decoder_dim=24,
                       upsample_rates=[3, 2], upsampling_ratios=[2, 2])
    decoder.update(codebook_size=codebook, num_quantizers=NUM_CODE_GROUPS, max_position_embeddings=8000,
                   rope_theta=10000, attention_bias=False, hidden_act="silu", layer_scale_initial_scale=0.01,
                   rms_norm_eps=1e-5, attention_dropout=0.0)
    samples_per_frame = math.prod(decoder["upsample_rates"]) * math.prod(decoder["upsampling_ratios"])
    # The encoder (Mimi) only serves voice cloning; it is written because the official loader builds it,
    # at the smallest widths Mimi accepts.
    encoder = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=2, head_dim=8, num_filters=2, codebook_size=codebook, codebook_dim=4,
                   vector_quantization_hidden_dimension=4, num_quantizers=NUM_CODE_GROUPS,
                   num_semantic_quantizers=1, sliding_window=16, sampling_rate=24000, frame_rate=12.5,
                   upsampling_ratios=[8, 6, 5, 4], upsample_groups=16, use_cache=False)
    return Qwen3TTSTokenizerV2Config(
        encoder_config=encoder, decoder_config=decoder, encoder_valid_num_quantizers=NUM_CODE_GROUPS,
        input_sample_rate=24000, output_sample_rate=24000, decode_upsample_rate=samples_per_frame,
        encode_downsample_rate=1920, architectures=["Qwen3TTSTokenizerV2Model"]), samples_per_frame


# ---------------------------------------------------------------------------------------------------------
# Weights: the reference's own initialisation leaves codebooks at zero and norms at one, which would hide
# mistakes; every parameter gets a draw that keeps its meaning (positive usage counts, norms near one).

def randomise(module, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            leaf = name.rsplit(".", 1)[-1]
            if "cluster_usage" in name:
                value = torch.rand(p.shape, generator=gen) * 1.5 + 0.5
            elif "embedding_sum" in name:
                value = noise
            elif leaf in ("alpha", "beta"):
                value = 0.3 * noise
            elif leaf == "scale":
                value = 0.1 + 0.05 * noise
            elif "norm" in name and p.dim() == 1:
                value = 1.0 + 0.1 * noise
            elif leaf == "bias" or p.dim() == 1:
                value = 0.05 * noise
            elif "embedding" in name:
                value = 0.5 * noise
            else:
                fan_in = p[0].numel()
                value = noise / math.sqrt(fan_in)
            p.copy_(value.to(p.dtype))


# ---------------------------------------------------------------------------------------------------------
# Writing the checkpoint folder in the released layout.

def write_main_config(folder: Path, config: Qwen3TTSConfig, dtype: str):
    data = json.loads((folder / "config.json").read_text())
    # save_pretrained writes the whole speaker encoder config with "model_type": "" which the official
    # loader rejects; the released checkpoints carry these two fields only.
    data["speaker_encoder_config"] = {"enc_dim": config.speaker_encoder_config.enc_dim,
                                      "sample_rate": config.speaker_encoder_config.sample_rate}
    data["torch_dtype"] = dtype
    data.pop("dtype", None)
    (folder / "config.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_generation_config(folder: Path):
    gen = {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
           "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0, "subtalker_top_k": 50,
           "max_new_tokens": 8192}
    (folder / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")


def write_speech_tokenizer(folder: Path, case, codebook, seed):
    config, samples_per_frame = codec_config(case, codebook)
    torch.manual_seed(seed)
    codec = Qwen3TTSTokenizerV2Model(config).eval()
    randomise(codec, seed)
    # Random decoders swing far past the [-1, 1] clamp at their output (tens), so most samples would be clamped
    # and the parity bar would compare little but the clamp. A quieter output convolution keeps the speech
    # inside the range, as a trained decoder's is.
    with torch.no_grad():
        out_conv = codec.decoder.decoder[-1].conv
        out_conv.weight.mul_(0.02)
        out_conv.bias.mul_(0.02)
    codec.save_pretrained(str(folder), safe_serialization=True)
    data = json.loads((folder / "config.json").read_text())
    data.pop("dtype", None)
    data["torch_dtype"] = "float32"
    (folder / "config.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    preprocessor = {"chunk_length_s": None, "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
                    "overlap": None, "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
                    "sampling_rate": 24000}
    (folder / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2) + "\n")
    return samples_per_frame


def write_checkpoint(folder: Path, case, codebook, seed, sharded, heads=None):
    """heads: fitted head weights by parameter name (see fit_heads), written in place of the random ones."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    text_ids, text_vocab = write_text_tokenizer(folder)
    text_vocab = max(text_vocab, 448)  # rows past the tokenizer's ids, as in the released models
    config = model_config(case, codebook, text_ids, text_vocab)
    torch.manual_seed(seed)
    model = Qwen3TTSForConditionalGeneration(config).eval()
    randomise(model, seed)
    if heads:
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in heads.items():
                params[name].copy_(value)
    model = model.to(torch.bfloat16)
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    shard = int(total * 0.6) if sharded else "2GB"
    model.save_pretrained(str(folder), safe_serialization=True, max_shard_size=shard)
    write_main_config(folder, config, "bfloat16")
    write_generation_config(folder)
    samples_per_frame = write_speech_tokenizer(folder / "speech_tokenizer", case, codebook, seed + 1)
    if sharded:
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        shards = sorted(set(index["weight_map"].values()))
        assert len(shards) == 2, f"{case}: expected 2 shards, save_pretrained wrote {shards}"
    else:
        assert (folder / "model.safetensors").is_file()
    return text_ids, samples_per_frame


# ---------------------------------------------------------------------------------------------------------
# Running the reloaded reference and recording what it computes.

class Recorder:
    """Hooks on the reloaded model: raw logits of every head call and the processed scores of every decision."""

    def __init__(self, tts):
        self.tts = tts
        talker = tts.talker
        self.talker_logits, self.predictor_logits = [], []
        self.talker_inputs, self.predictor_inputs = [], []
        self.talker_scores, self.predictor_scores = [], []
        self.prefill = None
        talker.codec_head.register_forward_hook(self._on_head(self.talker_inputs, self.talker_logits))
        for head in talker.code_predictor.lm_head:
            head.register_forward_hook(self._on_head(self.predictor_inputs, self.predictor_logits))
        talker.model.register_forward_hook(self._on_talker_model, with_kwargs=True)
        self._wrap_generate(talker, self.talker_scores)
        self._wrap_generate(talker.code_predictor, self.predictor_scores)

    @staticmethod
    def _on_head(inputs, logits):
        """A hook keeping a head call's last input row (its hidden state) and its raw logits."""
        def hook(module, args, output):
            inputs.append(args[0][0, -1].detach().clone())
            logits.append(output[0, -1].detach().clone())
        return hook

    def _on_talker_model(self, module, args, kwargs, output):
        embeds = kwargs.get("inputs_embeds")
        if embeds is not None and embeds.shape[1] > 1:
            self.prefill = (embeds[0].detach().clone(), output.last_hidden_state[0].detach().clone())

    @staticmethod
    def _wrap_generate(module, sink):
        plain = module.generate

        def generate(*args, **kwargs):
            kwargs["output_scores"] = True
            result = plain(*args, **kwargs)
            sink.append([s[0].detach().clone() for s in result.scores])
            return result
        module.generate = generate

    def reset(self):
        for store in (self.talker_logits, self.predictor_logits, self.talker_inputs, self.predictor_inputs,
                      self.talker_scores, self.predictor_scores):
            store.clear()
        self.prefill = None


def margin(scores):
    top = torch.topk(scores.float(), 2).values
    return float(top[0] - top[1])


def relative_margin(scores):
    """Top-1 minus top-2 over max|score| (suppressed ids ignored): the scale a bf16 forward's errors are measured in."""
    scores = scores.float()
    return margin(scores) / float(scores[torch.isfinite(scores)].abs().max())


FRAMES = 64
GEN = dict(do_sample=False, subtalker_dosample=False, repetition_penalty=1.05, top_k=50, top_p=1.0,
           temperature=0.9, subtalker_top_k=50, subtalker_top_p=1.0, subtalker_temperature=0.9,
           max_new_tokens=FRAMES + 1)


def run_prompt(wrapper, rec, prompt):
    tts = wrapper.model
    input_ids = wrapper._tokenize_texts([wrapper._build_assistant_text(prompt["text"])])[0]
    check_template(wrapper, input_ids[0].tolist(), prompt["text"])
    instruct_ids = None
    if prompt.get("instruct"):
        instruct_ids = wrapper._tokenize_texts([wrapper._build_instruct_text(prompt["instruct"])])[0]
    rec.reset()
    with torch.no_grad():
        codes, _ = tts.generate(input_ids=[input_ids], instruct_ids=[instruct_ids], languages=[prompt["language"]],
                                speakers=[prompt["speaker"]], non_streaming_mode=prompt["non_streaming_mode"], **GEN)
    codes = codes[0].tolist()
    frames = len(codes)
    talker_steps = rec.talker_scores[0]
    predictor_calls = rec.predictor_scores
    margins, relative = [], []
    for f in range(frames):
        decided = [talker_steps[f]] + list(predictor_calls[f])
        margins.append([float(f"{margin(s):.4g}") for s in decided])
        relative.append(min(relative_margin(s) for s in decided))
    vocab = tts.config.talker_config.vocab_size
    eos = tts.config.talker_config.codec_eos_token_id
    stopped = frames < FRAMES
    if stopped:
        assert int(talker_steps[frames].argmax()) == eos
    record = {
        "name": prompt["name"], "text": prompt["text"], "instruct": prompt.get("instruct"),
        "input_ids": input_ids[0].tolist(), "instruct_ids": None if instruct_ids is None else instruct_ids[0].tolist(),
        "speaker": prompt["speaker"], "language": prompt["language"],
        "non_streaming_mode": prompt["non_streaming_mode"], "generation": dict(GEN, min_new_tokens=2),
        "suppressed_from": vocab - CONTROL_SPAN, "eos_token_id": eos, "stopped_on_eos": stopped,
        "frames": frames, "codes": codes, "margins": margins,
        "min_margin": min(min(r) for r in margins) if margins else None,
        "min_relative_margin": float(f"{min(relative):.4g}") if relative else None,
    }
    logged = min(5, frames)
    tensors = {
        "talker_logits": torch.stack(rec.talker_logits[:logged]).float(),
        "predictor_logits": torch.stack(rec.predictor_logits[: logged * 15]).float().view(logged, 15, -1),
        "prefill_embeds": rec.prefill[0].float(), "prefill_hidden": rec.prefill[1].float(),
    }
    return record, tensors


def check_template(wrapper, ids, text):
    # generate() slices the prompt as role (3 ids) + text + 5 trailing ids; the tokenizer must agree.
    tok = wrapper.processor.tokenizer
    head = tok.convert_ids_to_tokens(ids[:3])
    tail = tok.convert_ids_to_tokens(ids[-5:])
    assert head == ["<|im_start|>", "assistant", "Ċ"], head
    assert tail == ["<|im_end|>", "Ċ", "<|im_start|>", "assistant", "Ċ"], tail
    assert tok.decode(ids[3:-5]) == text, (tok.decode(ids[3:-5]), text)


def first_long_enough(wrapper, rec, prompt):
    """The prompt with the first of its candidate texts that runs FRAMES frames without the end token."""
    for text in prompt["texts"]:
        record, tensors = run_prompt(wrapper, rec, dict(prompt, text=text))
        if record["frames"] == FRAMES:
            return record, tensors
    sys.exit(f"{prompt['name']}: every candidate text ended before {FRAMES} frames; add texts")


LONG_TEXTS = ["Hello world, this is a test of speech.", "The quick brown fox jumps over the lazy dog.",
              "你好，世界。今天天气很好。", "Numbers like 12 and 2026 are read aloud.",
              "Speak with a bright and cheerful tone!", "Guten Tag, wie geht es dir?", "Bonjour tout le monde.",
              "A warm, calm voice that speaks slowly.", "This sentence is a little longer than the others are.",
              "One, two, three, four, five, six, seven.", "Rain in the valley, sun on the hill.",
              "Please read this line with care and patience.", "Every morning the market opens at eight."]


def rotated(i):
    return LONG_TEXTS[i:] + LONG_TEXTS[:i]


def prompts_for(case):
    if case == "tiny06":
        return [
            dict(name="vivian_auto", texts=rotated(0), speaker="vivian", language="Auto", non_streaming_mode=False),
            dict(name="vivian_english", texts=rotated(1), speaker="vivian", language="English",
                 non_streaming_mode=False),
            dict(name="dylan_dialect_auto", texts=rotated(2), speaker="Dylan", language="Auto",
                 non_streaming_mode=False),
            dict(name="vivian_chinese_non_streaming", texts=rotated(3), speaker="vivian", language="Chinese",
                 non_streaming_mode=True),
        ]
    return [
        dict(name="design_auto", texts=rotated(0), speaker=None, language="Auto",
             instruct="A warm, calm voice that speaks slowly.", non_streaming_mode=False),
        dict(name="design_english", texts=rotated(4), speaker=None, language="English",
             instruct="A bright young voice.", non_streaming_mode=False),
        dict(name="design_german_non_streaming", texts=rotated(5), speaker=None, language="German",
             instruct="Deep and slow.", non_streaming_mode=True),
        dict(name="no_instruct_auto", texts=rotated(6), speaker=None, language="Auto", instruct=None,
             non_streaming_mode=False),
    ]


# Texts tried, in order, for the one prompt per case that must end on the end token within FRAMES.
STOP_TEXTS = ["Stop here.", "Short one.", "Yes.", "No!", "Hi.", "Okay then.", "Go.", "Wait.", "Fine, thanks.",
              "See you.", "Good night.", "Why not?", "Tea or coffee?", "Red.", "Blue sky.", "Now.", "Later.",
              "Maybe.", "Sure thing.", "All done."]


def find_stop_prompt(wrapper, rec, case):
    base = dict(prompts_for(case)[0])
    del base["texts"]
    for text in STOP_TEXTS:
        prompt = dict(base, name="stops_on_eos", text=text)
        record, tensors = run_prompt(wrapper, rec, prompt)
        if record["stopped_on_eos"] and record["frames"] >= 3:
            return record, tensors
    sys.exit(f"{case}: none of the {len(STOP_TEXTS)} stop texts ended on the end token within {FRAMES} frames; "
             f"add texts to STOP_TEXTS")


# ---------------------------------------------------------------------------------------------------------
# Decisive heads. A random model's logits are nearly flat: its top-2 margins fall under 1e-5 of max|logit|, so
# a bf16 forward flips greedy decisions a trained model makes by a wide margin. The heads (the Talker's
# codec_head and the predictor's 15 lm_heads) only turn a hidden state into a decision, so fitting them to
# their own greedy decisions on the chosen prompts, with a wide margin, changes no decision and no hidden
# state: the codes and the audio stay those of the random model; only the logits become decisive.

MIN_RELATIVE_MARGIN = 0.1  # the fixtures' floor: twice the CUDA tests' logits tolerance (5e-2 of max|logit|)
FIT_MARGIN = 0.15  # what the fit aims for, above the floor so that the bf16 rounding of the heads keeps it
FIT_STEPS = 1000
# The smallest of each fixture's decisions' margins, over max|score| of its step, as written (talker.json's
# min_relative_margin); a run that finds another says so.
RECORDED_MIN_MARGIN = {"tiny06": 0.118, "tiny17": 0.111}


def head_samples(rec):
    """(head parameter name, head input, raw logits, processed scores) for every decision of the last run."""
    talker_scores = rec.talker_scores[0]
    assert len(rec.talker_inputs) == len(talker_scores), (len(rec.talker_inputs), len(talker_scores))
    out = [("talker.codec_head.weight", h, raw, s)
           for h, raw, s in zip(rec.talker_inputs, rec.talker_logits, talker_scores)]
    predictor_scores = [s for call in rec.predictor_scores for s in call]
    assert len(rec.predictor_inputs) == len(predictor_scores), (len(rec.predictor_inputs), len(predictor_scores))
    for k, (h, raw, s) in enumerate(zip(rec.predictor_inputs, rec.predictor_logits, predictor_scores)):
        out.append((f"talker.code_predictor.lm_head.{k % (NUM_CODE_GROUPS - 1)}.weight", h, raw, s))
    return out


def fit_head(weight, samples):
    """A head near `weight` (a pull back to it) whose decisions on `samples` are the same, each aiming at
    FIT_MARGIN of max|score|.
    The logits processors (suppressed ids, the repetition penalty) are read off each sample's raw and processed
    scores and applied to the new logits the same way."""
    h = torch.stack([x[0] for x in samples])
    raw = torch.stack([x[1] for x in samples]).float()
    scores = torch.stack([x[2] for x in samples]).float()
    suppressed = torch.isinf(scores)
    penalised = ~suppressed & ((scores - raw).abs() > 1e-5 * raw.abs().clamp(min=1e-3))
    chosen = scores.argmax(1)
    is_chosen = torch.nn.functional.one_hot(chosen, weight.shape[0]).bool()

    def process(logits):
        logits = torch.where(penalised, torch.where(logits > 0, logits / 1.05, logits * 1.05), logits)
        return logits.masked_fill(suppressed, float("-inf"))

    assert torch.allclose(process(h @ weight.T)[~suppressed], scores[~suppressed], atol=1e-4), \
        "the processed scores are not the raw logits under suppression and the repetition penalty"
    fitted = weight.clone().requires_grad_(True)
    opt = torch.optim.Adam([fitted], lr=0.01)
    for _ in range(FIT_STEPS):
        s = process(h @ fitted.T)
        scale = s.masked_fill(suppressed, 0).abs().amax(1, keepdim=True).detach()
        gap = s.gather(1, chosen[:, None]) - s
        short = torch.relu(FIT_MARGIN * scale - gap).masked_fill(is_chosen | suppressed, 0)
        loss = short.sum() / len(h) + 1e-3 * ((fitted - weight) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    fitted = fitted.detach().to(torch.bfloat16)  # as the checkpoint stores it
    s = process(h @ fitted.float().T)
    assert torch.equal(s.argmax(1), chosen), "the fitted head changed a decision"
    return fitted, min(relative_margin(row) for row in s)


def fit_heads(wrapper, rec, records):
    """Decisive heads for the model of `wrapper`, fitted to its decisions on the prompts of `records`."""
    samples = {}
    for record in records:
        replay, _ = run_prompt(wrapper, rec, record)
        assert replay["codes"] == record["codes"], f"{record['name']}: a second run made other codes"
        for name, *sample in head_samples(rec):
            samples.setdefault(name, []).append(sample)
    params = dict(wrapper.model.named_parameters())
    heads, worst = {}, 1.0
    for name, group in samples.items():
        heads[name], smallest = fit_head(params[name].detach().float(), group)
        worst = min(worst, smallest)
    assert worst >= MIN_RELATIVE_MARGIN, f"the fitted heads decide by {worst:.3g} of max|logit| at worst, " \
                                         f"under {MIN_RELATIVE_MARGIN}: raise FIT_MARGIN or FIT_STEPS"
    return heads


def check_bf16(folder: Path, records):
    """The reference itself in bf16 (weights and activations, on CPU) makes every prompt's greedy codes: the
    margins leave room for a bf16 forward's rounding, as the CUDA Talker's tests require."""
    wrapper = Qwen3TTSModel.from_pretrained(str(folder), dtype=torch.bfloat16)
    rec = Recorder(wrapper.model.eval())
    for record in records:
        got, _ = run_prompt(wrapper, rec, record)
        assert got["codes"] == record["codes"] and got["stopped_on_eos"] == record["stopped_on_eos"], \
            f"{folder.name} {record['name']}: the bf16 reference makes other greedy codes"
    print(f"{folder.name}: the bf16 reference makes every prompt's greedy codes", flush=True)


def codec_expected(wrapper, codebook, samples_per_frame, seed):
    decoder = wrapper.model.speech_tokenizer.model.decoder
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, frames in (("short", 7), ("long", 23)):
        codes = torch.randint(0, codebook, (1, NUM_CODE_GROUPS, frames), generator=gen)
        with torch.no_grad():
            wav = decoder(codes)
        assert wav.shape == (1, 1, frames * samples_per_frame), wav.shape
        out[f"{name}.codes"] = codes[0].to(torch.int32).contiguous()  # [16, frames]
        out[f"{name}.audio"] = wav[0, 0].float().contiguous()  # [frames * samples_per_frame]
    return out


def speech_expected(wrapper, records, samples_per_frame):
    """The decoder's whole-sequence forward over each prompt's greedy codes: the speech a request of that prompt
    must end with, however the engine batches and windows it."""
    decoder = wrapper.model.speech_tokenizer.model.decoder
    out = {}
    for i, record in enumerate(records):
        codes = torch.tensor(record["codes"], dtype=torch.long).T.unsqueeze(0)  # [1, 16, frames]
        with torch.no_grad():
            wav = decoder(codes)
        assert wav.shape == (1, 1, codes.shape[-1] * samples_per_frame), wav.shape
        out[f"p{i}.audio"] = wav[0, 0].float().contiguous()
    return out


def describe_tensors(folder: Path, names):
    """Values straight from the written files, for the C++ reader's tests."""
    from safetensors import safe_open
    index_path = folder / "model.safetensors.index.json"
    where = json.loads(index_path.read_text())["weight_map"] if index_path.exists() else None
    out = []
    for name in names:
        file = where[name] if where else "model.safetensors"
        with safe_open(str(folder / file), framework="pt") as f:
            t = f.get_tensor(name)
        flat = t.float().flatten()
        out.append({"name": name, "file": file, "dtype": str(t.dtype).replace("torch.", ""),
                    "shape": list(t.shape), "first": flat[:4].tolist(), "last": flat[-1:].tolist()})
    return out


def check_reloaded(folder: Path, state, prefix):
    """Every tensor of the files reached the reloaded model (as float32, equal values), and nothing was left at
    its initial value: the loader found every weight under the name the layout gives it."""
    from safetensors import safe_open
    files = sorted(folder.glob("*.safetensors"))
    seen = set()
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                got = state.get(prefix + name)
                assert got is not None, f"{file}: tensor {name} is not a parameter of the reloaded model"
                assert got.dtype == torch.float32, f"{name}: reloaded as {got.dtype}"
                assert torch.equal(got, f.get_tensor(name).float()), f"{file}: {name} differs after reload"
                seen.add(prefix + name)
    missing = [k for k in state if k not in seen]
    assert not missing, f"{folder}: the reloaded model has weights the files lack: {missing[:5]}"


def make_case(root: Path, case, codebook, seed, sharded):
    folder = root / case
    print(f"{case}: writing checkpoint to {folder}", flush=True)
    write_checkpoint(folder, case, codebook, seed, sharded)
    wrapper = Qwen3TTSModel.from_pretrained(str(folder), dtype=torch.float32)
    rec = Recorder(wrapper.model.eval())
    # The prompts are chosen on the random heads; the fitted heads make the same decisions on them.
    chosen = [first_long_enough(wrapper, rec, p)[0] for p in prompts_for(case)]
    chosen.append(find_stop_prompt(wrapper, rec, case)[0])
    heads = fit_heads(wrapper, rec, chosen)
    print(f"{case}: rewriting the checkpoint with the fitted heads", flush=True)
    text_ids, samples_per_frame = write_checkpoint(folder, case, codebook, seed, sharded, heads)

    # The proof of the layout: the official loader reads the folder back; everything below uses that copy.
    wrapper = Qwen3TTSModel.from_pretrained(str(folder), dtype=torch.float32)
    tts = wrapper.model.eval()
    check_reloaded(folder, tts.state_dict(), "")
    check_reloaded(folder / "speech_tokenizer", tts.speech_tokenizer.model.state_dict(), "")
    rec = Recorder(tts)

    expected = folder / "expected"
    expected.mkdir()
    records, tensors = [], {}
    for i, first in enumerate(chosen):
        record, t = run_prompt(wrapper, rec, first)
        assert record["codes"] == first["codes"], f"{record['name']}: the fitted heads changed the codes"
        assert record["min_relative_margin"] >= MIN_RELATIVE_MARGIN, record["min_relative_margin"]
        records.append(record)
        for key, value in t.items():
            tensors[f"p{i}.{key}"] = value.contiguous()
        print(f"  {record['name']}: {record['frames']} frames, min margin {record['min_margin']:.3g} "
              f"({record['min_relative_margin']:.3g} of max|logit|)", flush=True)
    smallest = min(r["min_relative_margin"] for r in records)
    if abs(smallest - RECORDED_MIN_MARGIN[case]) > 5e-4:
        print(f"{case}: the smallest margin is now {smallest:.3g} of max|logit|, RECORDED_MIN_MARGIN says "
              f"{RECORDED_MIN_MARGIN[case]}: update it and the docstring", flush=True)
    (expected / "talker.json").write_text(json.dumps({"case": case, "prompts": records}) + "\n")
    save_file(tensors, str(expected / "talker_logits.safetensors"))
    check_bf16(folder, records)

    save_file(codec_expected(wrapper, codebook, samples_per_frame, seed + 2), str(expected / "codec.safetensors"))
    save_file(speech_expected(wrapper, records, samples_per_frame), str(expected / "speech.safetensors"))

    talker = tts.config.talker_config
    names = ["talker.model.codec_embedding.weight", "talker.codec_head.weight",
             "talker.model.layers.0.self_attn.q_proj.weight",
             f"talker.model.layers.{talker.num_hidden_layers - 1}.mlp.down_proj.weight",
             "talker.code_predictor.lm_head.14.weight"]
    if talker.hidden_size != talker.code_predictor_config.hidden_size:
        names.append("talker.code_predictor.small_to_mtp_projection.weight")
    codec_names = ["decoder.quantizer.rvq_first.vq.layers.0._codebook.embedding_sum",
                   "decoder.quantizer.rvq_rest.vq.layers.0._codebook.cluster_usage",
                   "decoder.pre_transformer.layers.0.self_attn.q_proj.weight"]
    summary = {"case": case, "text_special_ids": text_ids, "samples_per_frame": samples_per_frame,
               "talker": describe_tensors(folder, names),
               "speech_tokenizer": describe_tensors(folder / "speech_tokenizer", codec_names)}
    (expected / "checkpoint.json").write_text(json.dumps(summary, indent=1) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/qwen3tts"))
    parser.add_argument("--case", choices=["tiny06", "tiny17"], action="append")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = Path(args.out)
    cases = {"tiny06": dict(codebook=256, seed=606, sharded=False),
             "tiny17": dict(codebook=64, seed=1717, sharded=True)}
    for case in args.case or list(cases):
        make_case(root, case, **cases[case])
    total = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    print(f"fixture tree {root}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
