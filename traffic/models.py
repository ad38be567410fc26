"""Model presets from published configs, GPU types, and the per-layer FLOPs, params and bytes."""
from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

from badinput import InputError
from traffic.spec import SpecReader

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class Model:
    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    seq_len: int
    vocab: int
    kv_heads: int = 0        # 0 = same as heads (no grouped-query attention)
    experts: int = 1         # 1 = dense
    top_k: int = 1
    gated_mlp: bool = False  # SwiGLU: three FFN matrices instead of two
    bias: bool = True        # GPT has biases and LayerNorm; Llama/Mixtral have neither bias nor LN bias
    tied_embeddings: bool = True

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def moe(self) -> bool:
        return self.experts > 1


# Published configs: GPT-3 paper (Brown et al. 2020, Table 2.1) for the GPTs; the Hugging Face
# config.json of meta-llama/Llama-2-70b-hf and mistralai/Mixtral-8x7B-v0.1. Mixtral's seq_len is
# a training choice (its config allows 32768 positions). GPT-3 13B's table lists d_model 5140 with
# 40 heads of 128, which do not divide; 5120 (= 40 x 128) is what Megatron and others train.
PRESETS = {
    "gpt-small": Model("gpt-small", layers=12, hidden=768, ffn_hidden=3072, heads=12, seq_len=2048, vocab=50257),
    "gpt3-13b": Model("gpt3-13b", layers=40, hidden=5120, ffn_hidden=20480, heads=40, seq_len=2048, vocab=50257),
    "gpt3-175b": Model("gpt3-175b", layers=96, hidden=12288, ffn_hidden=49152, heads=96, seq_len=2048,
                       vocab=50257),
    "llama2-70b": Model("llama2-70b", layers=80, hidden=8192, ffn_hidden=28672, heads=64, kv_heads=8,
                        seq_len=4096, vocab=32000, gated_mlp=True, bias=False, tied_embeddings=False),
    "mixtral-8x7b": Model("mixtral-8x7b", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8,
                          seq_len=4096, vocab=32000, experts=8, top_k=2, gated_mlp=True, bias=False,
                          tied_embeddings=False),
}


@dataclass(frozen=True)
class Gpu:
    name: str
    peak_tflops: float    # dense 16-bit tensor-core peak
    hbm_gbps: float       # memory bandwidth in GB/s (bytes), for the memory-bound optimizer step


GPUS = {
    "v100": Gpu("v100", 125.0, 900.0),
    "a100": Gpu("a100", 312.0, 2039.0),
    "h100": Gpu("h100", 989.0, 3350.0),
    "h200": Gpu("h200", 989.0, 4800.0),
    "b200": Gpu("b200", 2250.0, 8000.0),
    "mi300x": Gpu("mi300x", 1307.0, 5300.0),
}


def model_from_spec(value, key="workload.model", file=None) -> Model:
    """A preset name or an inline mapping with the Model fields (name optional)."""
    if isinstance(value, str):
        if value not in PRESETS:
            raise InputError(key, "a preset (" + ", ".join(PRESETS) + ") or a mapping", value, file=file)
        return PRESETS[value]
    r = SpecReader(value, prefix=key, file=file)
    base = PRESETS[r.choice("preset", tuple(PRESETS))] if r.has("preset") else None
    kw = {}
    for f in fields(Model):
        if f.name == "name":
            kw["name"] = r.str("name", base.name if base else "inline")
        elif f.type in ("bool", bool):
            v = r.get(f.name, getattr(base, f.name) if base else f.default)
            if not isinstance(v, bool):
                raise r.error(f.name, "true or false", v)
            kw[f.name] = v
        else:
            default = getattr(base, f.name) if base else f.default
            minimum = 0 if f.name == "kv_heads" else 1
            if default is MISSING:  # required: "expected a value, found nothing"
                kw[f.name] = r.int(f.name, minimum=minimum)
            else:
                kw[f.name] = r.int(f.name, default, minimum=minimum)
    r.done()
    m = Model(**kw)
    if m.hidden % m.heads:
        raise r.error("heads", f"a divisor of hidden={m.hidden}", m.heads)
    if m.heads % m.kv:
        raise r.error("kv_heads", f"a divisor of heads={m.heads}", m.kv_heads)
    if m.top_k > m.experts:
        raise r.error("top_k", f"<= experts={m.experts}", m.top_k)
    return m


# ---- per-layer arithmetic (whole layer, one micro-batch; callers divide by tp) -----------------

def attention_flops(m: Model, tokens: int) -> float:
    dh = m.hidden // m.heads
    qkv = 2 * tokens * m.hidden * (m.hidden + 2 * m.kv * dh)
    scores_and_values = 2 * 2 * tokens * m.seq_len * m.hidden   # QK^T and AV (no causal discount)
    out = 2 * tokens * m.hidden * m.hidden
    return float(qkv + scores_and_values + out)


def mlp_flops(m: Model, tokens: int) -> float:
    """Dense FFN, or for MoE the top_k experts each token visits plus the router."""
    mats = 3 if m.gated_mlp else 2
    dense = 2 * tokens * m.hidden * m.ffn_hidden * mats
    if not m.moe:
        return float(dense)
    return float(dense * m.top_k + 2 * tokens * m.hidden * m.experts)


def logits_flops(m: Model, tokens: int) -> float:
    return float(2 * tokens * m.hidden * padded_vocab(m, 1))


def padded_vocab(m: Model, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of 128 x tp."""
    q = 128 * tp
    return -(-m.vocab // q) * q


def attention_params(m: Model) -> int:
    dh = m.hidden // m.heads
    w = m.hidden * (m.hidden + 2 * m.kv * dh) + m.hidden * m.hidden
    b = (m.hidden + 2 * m.kv * dh) + m.hidden if m.bias else 0
    norm = 2 * m.hidden if m.bias else m.hidden
    return w + b + norm


def expert_params(m: Model) -> int:
    """One FFN (one expert for MoE)."""
    mats = 3 if m.gated_mlp else 2
    b = m.ffn_hidden + m.hidden if m.bias else 0
    return mats * m.hidden * m.ffn_hidden + b


def mlp_dense_params(m: Model) -> int:
    """The FFN block's params synced over the whole data-parallel group (router and norm for MoE)."""
    norm = 2 * m.hidden if m.bias else m.hidden
    if m.moe:
        return norm + m.hidden * m.experts
    return norm + expert_params(m)


def total_params(m: Model) -> int:
    per_layer = attention_params(m) + mlp_dense_params(m) + (m.experts * expert_params(m) if m.moe else 0)
    emb = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    return m.layers * per_layer + emb
