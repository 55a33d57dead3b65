#!/usr/bin/env python3
"""Writes the text tokenizer's parity fixture (tests/fixtures/qwen3tts/text/).

Run with the reference environment (transformers 4.57.3, tokenizers, qwen-tts 0.1.1):

  pip download --no-deps dashscope -d /tmp/dash && unzip -o /tmp/dash/dashscope-*.whl -d /tmp/dash
  /work/refenv/bin/python tools/make_tokenizer_fixtures.py \
      --tiktoken /tmp/dash/dashscope/resources/qwen.tiktoken

What it does:
1. Turns Qwen's published BPE ranks (qwen.tiktoken: base64 bytes and rank per line) into the Hugging
   Face layout of a checkpoint folder: vocab.json (byte-to-unicode strings -> rank), merges.txt (one
   merge per multi-byte token, in rank order: the two parts byte-level BPE arrives at when it runs
   over the token's own bytes with only the lower ranks), tokenizer_config.json with Qwen3-TTS's added
   tokens, and a config.json as the released checkpoints carry (model_type qwen3_tts, transformers
   4.57.3). The full files stay in --work; they are not committed.
2. Loads that folder the way qwen_tts.Qwen3TTSModel.from_pretrained does (AutoProcessor with
   fix_mistral_regex=True) and records which pre-tokenisation regex it ended up with.
3. Encodes a deterministic corpus (hand-written edge cases plus seeded templates over many scripts)
   with that tokenizer, and again with the plain Qwen2 regex (the one a hub-id load keeps).
4. Writes the reduced vocabulary: the 256 byte tokens, every token the encodings produced, and the
   merges that built them (closure), with their original ids and in their original order. It then
   re-encodes the whole corpus with Hugging Face over the reduced files and fails unless every id
   list is identical (README.md in the fixture folder argues why it must be).
"""
import argparse
import base64
import json
import os
import random
import shutil
import sys
import unicodedata
from pathlib import Path

import tokenizers
import transformers
from transformers import AutoConfig, AutoModel, AutoProcessor, Qwen2TokenizerFast

QWEN2_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")

# Qwen3's added tokens (151643..151668) and the seven audio/TTS ones of Qwen3-TTS (151669..151675).
# The TTS names are not in the qwen-tts package; the ids of tts_pad/bos/eos come from its config
# (151671..151673), the names from two independent public ports that read the released
# tokenizer files (see the fixture README).
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False),
    ("</tool_response>", False), ("<think>", False), ("</think>", False),
    ("<|audio_start|>", True), ("<|audio_end|>", True), ("<tts_pad>", True), ("<tts_text_bos>", True),
    ("<tts_text_eod>", True), ("<tts_text_bos_single>", True), ("<|audio_pad|>", True),
]
FIRST_ADDED_ID = 151643


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character table that byte-level BPE spells tokens in."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHAR = bytes_to_unicode()


def spell(token: bytes) -> str:
    return "".join(BYTE_CHAR[b] for b in token)


def load_ranks(path: Path):
    ranks = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line:
            continue
        b64, rank = line.split()
        ranks[base64.b64decode(b64)] = int(rank)
    if sorted(ranks.values()) != list(range(len(ranks))):
        sys.exit(f"{path}: ranks are not 0..{len(ranks) - 1} without gaps")
    return ranks


def last_merge(token: bytes, ranks):
    """The two parts byte-level BPE over `token`'s bytes ends with when only lower ranks may merge."""
    limit = ranks[token]
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} (rank {limit}) does not reduce to two parts: {parts}")
    return parts[0], parts[1]


def convert(ranks):
    vocab = {spell(t): r for t, r in ranks.items()}
    merges = []
    for t, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(t) > 1:
            a, b = last_merge(t, ranks)
            merges.append((spell(a), spell(b)))
    return vocab, merges


def tokenizer_config():
    decoder = {}
    for i, (content, special) in enumerate(ADDED_TOKENS):
        decoder[str(FIRST_ADDED_ID + i)] = {"content": content, "lstrip": False, "normalized": False,
                                            "rstrip": False, "single_word": False, "special": special}
    return {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "bos_token": None,
        "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": 131072, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    }


def write_folder(folder: Path, vocab, merges, with_model_config: bool):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, separators=(",", ":")))
    with open(folder / "merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), ensure_ascii=False, indent=2))
    if with_model_config:
        # What a released checkpoint's config.json says about itself; the loader's regex choice reads it.
        (folder / "config.json").write_text(json.dumps({
            "architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts",
            "transformers_version": "4.57.3"}, indent=2))


def official_tokenizer(folder: Path):
    """The tokenizer Qwen3TTSModel.from_pretrained ends up with (its processor's tokenizer)."""
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration, Qwen3TTSProcessor
    AutoConfig.register("qwen3_tts", Qwen3TTSConfig)
    AutoModel.register(Qwen3TTSConfig, Qwen3TTSForConditionalGeneration)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor)
    processor = AutoProcessor.from_pretrained(str(folder), fix_mistral_regex=True)
    return processor


def split_regex(tok) -> str:
    pre = json.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"]
    return pre["pretokenizers"][0]["pattern"]["Regex"]


def with_regex(tok, pattern: str):
    tok.backend_tokenizer.pre_tokenizer[0] = tokenizers.pre_tokenizers.Split(
        pattern=tokenizers.Regex(pattern), behavior="isolated")
    return tok


# ---------------------------------------------------------------------------------------------
# The corpus: hand-written edge cases first, then seeded templates. Every string is kept as
# written (the tokenizer normalises; the corpus must carry un-normalised text too).

HAND = [
    "", " ", "  ", "\t", "\n", "\r\n", "\n\n\n", " \n ", "a", "A", "hello", "Hello world", " Hello",
    "Hello  world", "Hello   world   ", "don't", "DON'T", "I'm", "you're", "we've", "they'll", "he'd",
    "it's", "IT'S", "'s", "'sometimes", "'Sometimes", "'re'", "rock'n'roll", "o'clock", "Ma'am",
    "camelCase", "CamelCase", "camelCaseWordsHere", "XMLHttpRequest", "getHTTPResponseCode", "iPhone",
    "McDonald's", "ABCdef", "abcDEF", "aBcDeF", "HTTPServer2Go", "snake_case_name", "kebab-case-name",
    "12345", "3.14159", "1,000,000", "2026-12-05", "00:00:00", "1234567890123456789012345678901234567890",
    "v1.2.3", "x86_64", "0x7fff", "1e-10", "½ ¼ ¾", "①②③", "٣٤٥", "१२३४", "Ⅻ", "²³",
    "你好，世界！", "今天天气很好。", "我爱北京天安门", "自然语言处理是人工智能的一个分支。",
    "こんにちは世界", "カタカナとひらがな", "東京タワー", "ｶﾀｶﾅ", "ＡＢＣ１２３",
    "안녕하세요 세계", "한국어 텍스트", "مرحبا بالعالم", "السلام عليكم", "नमस्ते दुनिया", "हिन्दी",
    "Привет, мир!", "Съешь же ещё этих мягких французских булок", "Ελληνικά", "עברית", "ไทย ภาษา",
    "café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström", "A\u030angstro\u0308m", "résumé", "Zoë",
    "ḱ", "k\u0301", "q\u0307\u0323", "e\u0301\u0302\u0303", "\u0301", "a\u0301\u0301\u0301", "ﬁ", "Å",
    "\u1100\u1161\u11a8", "각", "Ω", "Ω", "Ä", "ñ", "n\u0303", "Ǆ", "ǅ", "ǆ", "ᾼ", "ß", "ẞ",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇯🇵🇺🇸", "👩🏾‍💻", "🤷‍♀️", "😀😀😀", "emoji 🎉 party",
    "<|im_start|>", "<|im_end|>", "<|im_start|>assistant\nHello<|im_end|>\n",
    "text<|endoftext|>more", "<tts_pad><tts_text_bos><tts_text_eod>", "<|im_start|><|im_start|>",
    "<|im_start", "im_start|>", "<<|im_end|>>", "< |im_end| >", "<think>reason</think>",
    "a<|audio_start|>b<|audio_end|>c", "  <|im_end|>  ", "\n<|im_start|>\n",
    "def f(x):\n    return x + 1\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "if (a && b || !c) { return; }", "#include <vector>", "std::vector<int> v{1, 2, 3};",
    "SELECT * FROM users WHERE id = 42;", "console.log(`${x}`);", "x => x * 2", "a->b", "i++",
    "...", "!!!", "???", "?!?!", "---", "***", "___", "…", "——", "。。。", "！！", "、、", "////",
    "\\\\\\", "((()))", "[[]]", "{{}}", "<<>>", "@#$%^&*", "~`|", "\"quoted\"", "'single'",
    "“curly” ‘quotes’", "«guillemets»", "a.b.c", "e.g.", "U.S.A.", "Mr. Smith", "http://example.com/a?b=c&d=e",
    "user@example.com", "C:\\Windows\\System32", "/usr/local/bin", "\u00a0nbsp\u00a0", "\u2003em space",
    "\u3000全角空白", "zero\u200bwidth", "\u200d", "\ufeffbom", "tab\tseparated\tvalues", "a\r\nb\rc\nd",
    "   leading", "trailing   ", "mixed \t \n whitespace", "\n\n  \n", " \t\n\r\x0b\x0c", "a\x0bb\x0cc",
    "line1\n\nline2", "   \n   \n", "word\n", "word \n", "word  \n\n", "/\n", "x/\n\n", ".\n\n",
    "ÀÉÎÕÜ", "àéîõü", "Dvořák", "Łódź", "Ísland", "Ærøskøbing", "İstanbul", "ǅemal", "Ǳ",
    "ℌ𝔢𝔩𝔩𝔬", "𝐁𝐨𝐥𝐝", "𝟙𝟚𝟛", "ℕ", "™", "©®", "€100", "$5.00", "£3", "¥1000", "₹500", "100%",
    "Ok\u0336", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA",
    "ا\u064e\u0644\u0652\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629", "क्षत्रिय", "ज़्यादा",
    "ᄀᄀᄀ", "漢字かな交じり文", "中文English混合", "日本語とEnglish", "한국어와English", "123abc456",
    "abc123def", "A1B2C3", "Ⅰ Ⅱ Ⅲ", "x²+y²=z²", "α+β=γ", "∑∫∂√∞", "→←↑↓", "♠♣♥♦", "☃", "★☆",
    # Where the alternatives of the two regexes meet: slashes after line breaks, case-folded
    # contractions, modifier letters and marks at word edges, every kind of white space.
    " <=\n/x", "a/\n/\n/b", "x!!\r\n\r\n/y", "//\n//", "a */\n\n/* b", "http://a/b/\n", "?\n\n", "?/\r",
    "'ſ", "'ſt", "it'ſ", "'ﬆa", "'ſa", "'\u212aa", "'S", "'T'RE'VE'M'LL'D", "x'Ll", "''s", "' s", "'\u0301s",
    "  \u0301x", "\u0301\u0301", " \u0301", "a \u0301", "ʰello", "helloʰ", "ーー", "コーヒー", "々々", "ǅa", "aǅ",
    "Ǆǅǆ", "ᾈᾀ", "\u0345", "x\u3000\u3000y", "a\u2028b", "a\u2029b", "a\x85b", "a\u200bb", "a\u180eb",
    "1\u20dd", "ⅷ", "𝟘𝟙", "\r\r\n\n", " \r\n", "\t\n \n\t", "word \t\n", "a  ", "a \n", "a\t\tb",
    "  a", "\n a", " \n a", "a\u00a0\u00a0b", "a\u2009b", "\u3000", "A\u030a\u0301", "ÅB", "ABC\u0301def",
    "Straße", "STRASSE", "ǈ", "ǋa", "MacBook", "eBay", "ÉCOLE", "Élan", "ÉlanVital", "ﬁnance", "Ⓐⓑ", "ⅰⅱ",
]


def pick(rng, seq):
    return seq[rng.randrange(len(seq))]


WORDS_EN = ("the quick brown fox jumps over lazy dog speech synthesis model audio stream request "
            "token voice language text example server latency throughput batch frame codec "
            "Hello World OpenAI Qwen GPU CUDA HTTP JSON API").split()
WORDS_ZH = list("我你他她们的是在有和不了人这中大为上个国到说时要就出会可也对生能而子那得于着下自之年过发后作里")
WORDS_ZH2 = ["今天", "天气", "语音", "合成", "模型", "北京", "上海", "中国", "人工智能", "世界", "学习", "音频"]
WORDS_JA = ["こんにちは", "ありがとう", "東京", "音声", "合成", "モデル", "テスト", "です", "ます", "の", "は", "が"]
WORDS_KO = ["안녕하세요", "감사합니다", "서울", "음성", "합성", "모델", "테스트", "입니다", "은", "는", "이", "가"]
WORDS_AR = ["مرحبا", "شكرا", "العالم", "صوت", "نموذج", "اختبار", "في", "من", "على", "إلى"]
WORDS_HI = ["नमस्ते", "धन्यवाद", "भारत", "आवाज़", "मॉडल", "परीक्षण", "में", "है", "का", "की"]
WORDS_RU = ["привет", "спасибо", "Москва", "голос", "модель", "тест", "и", "в", "не", "на", "Россия"]
WORDS_LAT = ["café", "naïve", "résumé", "Straße", "Ångström", "Dvořák", "Łódź", "façade", "jalapeño",
             "crème", "brûlée", "Müller", "São", "Paulo", "Ærø", "Øresund", "Île", "Çağrı", "Şişli"]
EMOJI = ["😀", "😂", "🥲", "👍", "👍🏻", "👍🏿", "❤️", "🔥", "🎉", "👨‍👩‍👧", "👩‍🔬", "🏳️‍⚧️", "🧑🏽‍🚀",
         "🇨🇳", "🇫🇷", "✨", "🙏", "💯", "🤖", "☕"]
PUNCT = [".", ",", "!", "?", ";", ":", "...", "!!", "?!", "—", "–", "-", "(", ")", "\"", "'", "。", "，",
         "！", "？", "、", "「", "」", "《", "》", "…", "/", "\\", "*", "#", "@", "&", "%"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", " \n", "\r\n", "\u3000", "\u00a0", " \t "]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D", "'x"]
SPECIALS = [c for c, _ in ADDED_TOKENS]
COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0327", "\u0323", "\u0331",
             "\u064b", "\u093c", "\u094d", "\u0e31", "\u20dd", "\ufe0f", "\u200d"]
CODE = ["def", "return", "class", "import", "self", "None", "if", "else", "for", "while", "int", "void",
        "std::string", "nullptr", "const", "auto", "x", "y", "i", "j", "getValue", "setValue",
        "parseJSON", "HTTPRequest", "my_var", "MAX_SIZE", "__init__", "0", "1", "42", "3.14", "==", "!=",
        "<=", ">=", "+=", "->", "=>", "::", "&&", "||", "{", "}", "[", "]", "(", ")", ";", "//", "/*", "*/"]


def camel(rng):
    parts = [pick(rng, ["get", "set", "parse", "http", "url", "json", "xml", "id", "user", "name", "value",
                        "max", "min", "buffer", "stream", "audio", "frame"]) for _ in range(rng.randint(2, 4))]
    style = rng.randrange(4)
    if style == 0:
        return parts[0] + "".join(p.capitalize() for p in parts[1:])
    if style == 1:
        return "".join(p.capitalize() for p in parts)
    if style == 2:
        return parts[0] + "".join(p.upper() if len(p) <= 4 else p.capitalize() for p in parts[1:])
    return "".join(p.upper() for p in parts[:-1]) + parts[-1].capitalize()


def digits(rng):
    n = rng.choice([1, 2, 3, 4, 7, 12, 25, 60])
    s = "".join(str(rng.randrange(10)) for _ in range(n))
    return rng.choice([s, s + "." + str(rng.randrange(1000)), "-" + s, s + "%", "#" + s, s[:3] + "," + s])


def sentence(rng, words, sep=" ", n=(3, 12)):
    return sep.join(pick(rng, words) for _ in range(rng.randint(*n)))


def combining(rng):
    base = pick(rng, list("aeiounAEIOUcsz") + ["ا", "क", "ก", "ㄱ", "α", "я"])
    return base + "".join(pick(rng, COMBINING) for _ in range(rng.randint(1, 3)))


# Old Unicode blocks (assigned long before every library's Unicode version here), for random strings.
BLOCKS = [(0x20, 0x7e), (0x09, 0x0d), (0xa0, 0xff), (0x100, 0x24f), (0x250, 0x2ff), (0x300, 0x36f), (0x370, 0x3ff),
          (0x400, 0x4ff), (0x5d0, 0x5ea), (0x600, 0x6ff), (0x900, 0x97f), (0xe00, 0xe5b), (0x1100, 0x11ff),
          (0x1e00, 0x1eff), (0x1f00, 0x1ffe), (0x2000, 0x206f), (0x2070, 0x209c), (0x20a0, 0x20b9), (0x2100, 0x218b),
          (0x2190, 0x22ff), (0x2460, 0x24ff), (0x3000, 0x303f), (0x3041, 0x30ff), (0x4e00, 0x9fa5), (0xac00, 0xd7a3),
          (0xfe00, 0xfe0f), (0xff01, 0xffee), (0x1f300, 0x1f64f), (0x1f900, 0x1f9ff), (0x1d400, 0x1d7ff)]


def random_chars(rng):
    out = []
    while len(out) < rng.randint(1, 24):
        lo, hi = pick(rng, BLOCKS)
        c = chr(rng.randint(lo, hi))
        if unicodedata.category(c) in ("Cn", "Co", "Cs"):
            continue
        out.append(c if rng.random() > 0.15 else pick(rng, [" ", "\n", "'", "/", "\u200d"]))
    return "".join(out)


def generated(rng, kind):
    if kind == "random":
        return random_chars(rng)
    if kind == "nfd":  # decomposed text: NFC must compose it back as the reference does
        return unicodedata.normalize(pick(rng, ["NFD", "NFKD"]), generated(rng, pick(rng, ["latin", "ko", "hi", "combining"])))
    if kind == "en":
        s = sentence(rng, WORDS_EN)
        return s[0].upper() + s[1:] + pick(rng, PUNCT)
    if kind == "zh":
        return sentence(rng, WORDS_ZH + WORDS_ZH2, sep="", n=(4, 30)) + pick(rng, ["。", "！", "？", "，", ""])
    if kind == "ja":
        return sentence(rng, WORDS_JA, sep="", n=(3, 12)) + pick(rng, ["。", "、", "！", ""])
    if kind == "ko":
        return sentence(rng, WORDS_KO, n=(2, 8)) + pick(rng, [".", "?", "!", ""])
    if kind == "ar":
        return sentence(rng, WORDS_AR) + pick(rng, ["،", "؟", ".", ""])
    if kind == "hi":
        return sentence(rng, WORDS_HI) + pick(rng, ["।", "?", ""])
    if kind == "ru":
        return sentence(rng, WORDS_RU) + pick(rng, [".", "!", "?", ""])
    if kind == "latin":
        return sentence(rng, WORDS_LAT + WORDS_EN, n=(2, 10))
    if kind == "combining":
        return sentence(rng, [combining(rng) for _ in range(8)] + WORDS_LAT, sep=pick(rng, ["", " "]), n=(1, 6))
    if kind == "emoji":
        return sentence(rng, EMOJI + WORDS_EN, sep=pick(rng, ["", " "]), n=(1, 8))
    if kind == "digits":
        return sentence(rng, [digits(rng) for _ in range(6)] + WORDS_EN, sep=pick(rng, ["", " ", ", "]), n=(1, 6))
    if kind == "space":
        return "".join(pick(rng, SPACES) + pick(rng, WORDS_EN + PUNCT + WORDS_ZH2) for _ in range(rng.randint(1, 6))) \
            + pick(rng, SPACES)
    if kind == "code":
        return "".join(pick(rng, CODE) + pick(rng, [" ", "", "\n", "\n    ", "\t", " "]) for _ in range(rng.randint(3, 16)))
    if kind == "camel":
        return " ".join(camel(rng) for _ in range(rng.randint(1, 4)))
    if kind == "contraction":
        return " ".join(pick(rng, WORDS_EN + WORDS_RU[:3]) + (pick(rng, CONTRACTIONS) if rng.random() < 0.6 else "")
                        for _ in range(rng.randint(1, 6)))
    if kind == "punct":
        return "".join(pick(rng, PUNCT) * rng.randint(1, 4) + pick(rng, ["", " ", "\n", "a", "的"])
                       for _ in range(rng.randint(1, 6)))
    if kind == "special":
        pieces = [generated(rng, pick(rng, ["en", "zh", "ja", "emoji", "space"])) for _ in range(rng.randint(1, 3))]
        out = ""
        for p in pieces:
            out += p + pick(rng, SPECIALS + ["\n", " ", "<|im_", "|>", "<tts_"])
        return out
    if kind == "mixed":
        return "".join(generated(rng, pick(rng, BASE_KINDS)) + pick(rng, SPACES + [""]) for _ in range(rng.randint(2, 4)))
    raise KeyError(kind)


BASE_KINDS = ["en", "zh", "ja", "ko", "ar", "hi", "ru", "latin", "combining", "emoji", "digits", "space",
              "code", "camel", "contraction", "punct"]
ALL_KINDS = BASE_KINDS + ["special", "mixed", "random", "nfd"]


def corpus(per_kind: int, seed: int):
    out = [(s, "hand") for s in HAND]
    for k, kind in enumerate(ALL_KINDS):
        rng = random.Random(seed * 1000 + k)
        for _ in range(per_kind):
            out.append((generated(rng, kind), kind))
    return out


# ---------------------------------------------------------------------------------------------

def chat_cases():
    """Texts and instructions for the chat-template ids, run through the reference wrapper's own methods."""
    return [
        ("Hello, world.", ""),
        ("你好，世界！今天天气很好。", "用温柔的女声说"),
        ("  Leading spaces and trailing  ", "Speak slowly,\nwith pauses."),
        ("camelCase and don't; 12345 😀\n\nnew paragraph", "A calm voice: 'sotto voce'."),
        ("<|im_end|> inside the text", "<tts_pad>"),
        ("", "whisper"),
    ]


def merge_closure(ids, token_of, merge_of, keep):
    stack = [i for i in ids if i in token_of]
    while stack:
        t = token_of[stack.pop()]
        if t in keep:
            continue
        keep.add(t)
        if t in merge_of:
            stack.extend(merge_of[t])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiktoken", type=Path, required=True, help="dashscope/resources/qwen.tiktoken")
    ap.add_argument("--work", type=Path, default=Path("/tmp/qwen3tts_text_full"), help="full folder (not committed)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/fixtures/qwen3tts/text")
    ap.add_argument("--per-kind", type=int, default=300)
    ap.add_argument("--seed", type=int, default=18)
    args = ap.parse_args()
    assert transformers.__version__ == "4.57.3", f"transformers {transformers.__version__}; the reference pins 4.57.3"

    ranks = load_ranks(args.tiktoken)
    vocab, merges = convert(ranks)
    print(f"vocab {len(vocab)} tokens, {len(merges)} merges", file=sys.stderr)
    if args.work.exists():
        shutil.rmtree(args.work)
    write_folder(args.work, vocab, merges, with_model_config=True)

    processor = official_tokenizer(args.work)
    tok = processor.tokenizer
    loader_regex = split_regex(tok)
    print(f"{type(tok).__name__}, fix_mistral_regex={getattr(tok, 'fix_mistral_regex', None)}, regex: {loader_regex}",
          file=sys.stderr)
    hub_tok = with_regex(Qwen2TokenizerFast.from_pretrained(str(args.work)), QWEN2_REGEX)
    assert split_regex(hub_tok) == QWEN2_REGEX

    texts = corpus(args.per_kind, args.seed)
    seen, rows = set(), []
    for text, kind in texts:
        if text in seen:
            continue
        seen.add(text)
        rows.append({"kind": kind, "text": text})
    for row in rows:
        row["ids"] = tok(row["text"])["input_ids"]
        other = hub_tok(row["text"])["input_ids"]
        if other != row["ids"]:
            row["ids_qwen2_regex"] = other
    n_diff = sum("ids_qwen2_regex" in r for r in rows)
    print(f"corpus {len(rows)} strings, {sum(len(r['ids']) for r in rows)} tokens; "
          f"{n_diff} encode differently under the plain Qwen2 regex", file=sys.stderr)

    # The wrapper's own template methods, so the fixture follows the package rather than a copy of it.
    from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel
    wrapper = Qwen3TTSModel.__new__(Qwen3TTSModel)
    wrapper.processor, wrapper.device = processor, "cpu"
    chat = []
    for text, instruct in chat_cases():
        case = {"text": text, "instruct": instruct,
                "input_ids": wrapper._tokenize_texts([wrapper._build_assistant_text(text)])[0][0].tolist(),
                "ref_ids": wrapper._tokenize_texts([wrapper._build_ref_text(text)])[0][0].tolist(),
                "instruct_ids": (wrapper._tokenize_texts([wrapper._build_instruct_text(instruct)])[0][0].tolist()
                                 if instruct else None)}
        chat.append(case)

    # Reduced vocabulary: byte tokens + every produced token + the merges that built them.
    token_of = {r: t for t, r in vocab.items()}
    merge_of = {a + b: (vocab[a], vocab[b]) for a, b in merges}
    keep = set(BYTE_CHAR.values())
    for row in rows:
        merge_closure(row["ids"], token_of, merge_of, keep)
        merge_closure(row.get("ids_qwen2_regex", []), token_of, merge_of, keep)
    for case in chat:
        for key in ("input_ids", "ref_ids", "instruct_ids"):
            merge_closure(case[key] or [], token_of, merge_of, keep)
    small_vocab = {t: r for t, r in vocab.items() if t in keep}
    small_merges = [(a, b) for a, b in merges if a + b in keep]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    write_folder(out / "vocab", small_vocab, small_merges, with_model_config=False)
    print(f"reduced vocab {len(small_vocab)} tokens, {len(small_merges)} merges", file=sys.stderr)

    # The official tokenizer's own pipeline with only its BPE model swapped for the reduced files (a
    # folder load would renumber the added tokens, since the reduced ids have gaps).
    spec = json.loads(tok.backend_tokenizer.to_str())
    spec["model"]["vocab"] = json.loads((out / "vocab/vocab.json").read_text(encoding="utf-8"))
    lines = (out / "vocab/merges.txt").read_text(encoding="utf-8").splitlines()[1:]
    spec["model"]["merges"] = [line.split(" ") for line in lines]
    small = tokenizers.Tokenizer.from_str(json.dumps(spec))
    # tokenizers numbers added tokens after the model's vocabulary size whatever ids they carry.
    # The numbers may collide with the reduced vocabulary's own ids, so map back by token text.
    real_id = dict(spec["model"]["vocab"])
    real_id.update({c: FIRST_ADDED_ID + i for i, (c, _) in enumerate(ADDED_TOKENS)})
    for pattern, key in ((loader_regex, "ids"), (QWEN2_REGEX, "ids_qwen2_regex")):
        small.pre_tokenizer[0] = tokenizers.pre_tokenizers.Split(pattern=tokenizers.Regex(pattern), behavior="isolated")
        bad = [r["text"] for r in rows
               if [real_id[t] for t in small.encode(r["text"]).tokens] != r.get(key, r["ids"])]
        if bad:
            sys.exit(f"the reduced vocabulary encodes {len(bad)} strings differently under {pattern!r}, "
                     f"first {bad[0]!r}")
    print("the reduced vocabulary reproduces every id list under both regexes", file=sys.stderr)

    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    meta = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "loader": "AutoProcessor.from_pretrained(folder, fix_mistral_regex=True) as qwen_tts 0.1.1",
            "loader_regex": loader_regex, "qwen2_regex": QWEN2_REGEX,
            "strings": len(rows), "tokens": sum(len(r["ids"]) for r in rows), "chat": chat}
    (out / "reference.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
