"""Train the point reader (trainer/grading/rubric/reader.py) on the tuning questions only.

    python -m bench.rubric_reader                 # train, write reader.safetensors, report
    python -m bench.rubric_reader --validate      # hold out a fifth of the tuning questions

Training pairs (point side, sentence) -> other | states | wrong, from two sources, both on
questions outside the held-out part (bench.rubric_calibration.held_out):

- tests/data/rubric_reader/sentences_*.yaml: per tuning point, six sentences that state it
  (prose and terse notes), six fluent wrong ones on its subject and three true ones about
  something else, written for this by helpers who saw the point (never the blind set);
- the tuning answers of the old set and of the blind set: per point, the answer's sentence
  closest to it, labelled from the expert's verdict on the point (covered -> states,
  contradicted -> wrong, otherwise other).

The held-out questions' answers are only read for the report, after training.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time
from pathlib import Path

import yaml

from bench.rubric_calibration import (
    FOLDS,
    ROOT,
    EmbeddingCache,
    analyse,
    as_case,
    bank_points,
    bucket,
    fold,
    fold_path,
    held_out,
    load_cases,
)

SENTENCES = ROOT / "tests" / "data" / "rubric_reader"
TRAINED_FROM = 4  # layers 4..5 are fine-tuned, 0..3 and the embeddings stay as shipped
EPOCHS = 3
BATCH = 32
LR = 8e-5  # the trained layers
HEAD_LR = 2e-3  # the fresh head
SEED = 29


def written_pairs(points, slugs: set[str], rng: random.Random) -> list[tuple[str, str, int]]:
    from trainer.grading.rubric import reader

    out = []
    for path in sorted(SENTENCES.glob("sentences_*.yaml")):
        for q in yaml.safe_load(path.read_text())["questions"]:
            if q["slug"] not in slugs or q["slug"] not in points:
                continue
            rubric = points[q["slug"]]
            written = {p["index"]: p for p in q["points"]}
            for idx, p in written.items():
                point = rubric[idx]
                # YAML reads the bare keys true/false as booleans
                for label, keys in ((1, ("true", True)), (2, ("false", False)), (0, ("other",))):
                    for s in next((p[k] for k in keys if k in p), None) or []:
                        out.append((reader.premise(point, rng.randrange(8)), str(s), label))
                # another point's right sentences are "other" for this one
                others = [
                    s
                    for j, o in written.items()
                    if j != idx
                    for s in o.get(True, o.get("true")) or []
                ]
                for s in rng.sample(others, min(3, len(others))):
                    out.append((reader.premise(point, rng.randrange(8)), str(s), 0))
    return out


def answer_pairs(cases, points, retrievals) -> list[tuple[str, str, int]]:
    """Per (answer, ordinary point): its closest single sentence, labelled by the expert
    (`cases` in bench.rubric_calibration.Case's shape: blind ones through as_case)."""
    from trainer.grading.rubric import params, reader

    t = params.load().thresholds
    out = []
    for case, r in zip(cases, retrievals, strict=True):
        if not r.units:
            continue
        for i, point in enumerate(points[case.slug]):
            if point.penalty:
                continue
            ks = [k for k in r.pos[i].argsort()[::-1] if len(r.units[k].parts) == 1]
            if not ks or r.pos[i][ks[0]] < t.retrieve:
                continue
            k = ks[0]
            label = 1 if i in case.expert else 2 if i in case.contradicts else 0
            out.append(
                (reader.premise(point, int(r.claim_index[i][k]) - 1), r.units[k].text, label)
            )
    return out


def split_val(slug: str) -> bool:
    return bucket(slug, 5, "val:") == 0


def frozen_states(model, pairs, log=print):
    """Per pair, the hidden states entering the first trained layer (the frozen part runs
    once, not once per epoch)."""
    import torch

    out: list = [None] * len(pairs)
    order = sorted(range(len(pairs)), key=lambda j: len(pairs[j][0]) + len(pairs[j][1]))
    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in range(0, len(order), 64):
            idx = order[b : b + 64]
            enc = model.encode([(pairs[j][0], pairs[j][1]) for j in idx])
            hidden = model.bert(**enc, output_hidden_states=True).hidden_states[TRAINED_FROM]
            for row, j in enumerate(idx):
                n = int(enc["attention_mask"][row].sum())
                out[j] = hidden[row, :n].clone()
    log(f"frozen layers over {len(pairs)} pairs: {time.perf_counter() - t0:.0f} s")
    return out


def top_logits(model, states):
    """The trained layers and the head over a batch of frozen states (mean-pooled)."""
    import torch

    width = max(len(h) for h in states)
    h = torch.zeros(len(states), width, states[0].shape[1])
    mask = torch.zeros(len(states), width)
    for row, s in enumerate(states):
        h[row, : len(s)] = s
        mask[row, : len(s)] = 1.0
    additive = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
    for layer in model.bert.encoder.layer[TRAINED_FROM:]:
        o = layer(h, attention_mask=additive)
        h = o[0] if isinstance(o, tuple) else o
    pooled = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
    return model.head(pooled)


def train(pairs, epochs: int = EPOCHS, log=print):
    import torch

    from trainer.grading.rubric import reader

    torch.manual_seed(SEED)
    bert, tokenizer, head = reader.base()
    bert.eval()
    for name, param in bert.named_parameters():
        layer = name.split(".")[2] if name.startswith("encoder.layer.") else None
        param.requires_grad = layer is not None and int(layer) >= TRAINED_FROM
    model = reader.Reader(bert, tokenizer, head, TRAINED_FROM)
    states = frozen_states(model, pairs, log)
    top = [p for p in bert.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        [{"params": top, "lr": LR}, {"params": list(head.parameters()), "lr": HEAD_LR}],
        weight_decay=0.01,
    )
    labels = torch.tensor([y for *_, y in pairs])
    counts = torch.bincount(labels, minlength=3).float()
    loss_fn = torch.nn.CrossEntropyLoss(weight=counts.sum() / (3 * counts.clamp(min=1)))
    total = epochs * ((len(pairs) + BATCH - 1) // BATCH)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=[LR, HEAD_LR], total_steps=total, pct_start=0.1
    )
    rng = random.Random(SEED)
    for epoch in range(epochs):
        for layer in bert.encoder.layer[TRAINED_FROM:]:
            layer.train()
        head.train()
        order = list(range(len(pairs)))
        rng.shuffle(order)
        t0, run = time.perf_counter(), 0.0
        for b in range(0, len(order), BATCH):
            idx = order[b : b + BATCH]
            loss = loss_fn(top_logits(model, [states[j] for j in idx]), labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            run += float(loss.detach()) * len(idx)
        log(f"epoch {epoch + 1}: loss {run / len(pairs):.3f} ({time.perf_counter() - t0:.0f} s)")
    bert.eval()
    head.eval()
    return model


def evaluate(model, pairs) -> dict:
    import numpy as np

    if not pairs:
        return {}
    probs = np.vstack(
        [
            model.probabilities([(a, s) for a, s, _ in pairs[b : b + 64]])
            for b in range(0, len(pairs), 64)
        ]
    )
    y = np.array([lab for *_, lab in pairs])
    pred = probs.argmax(1)
    out = {"n": len(pairs), "accuracy": float((pred == y).mean())}
    for c, name in enumerate(("other", "states", "wrong")):
        sel = y == c
        out[f"recall {name}"] = float((pred[sel] == c).mean()) if sel.any() else float("nan")
    # states vs the rest, as the grader uses it
    from sklearn.metrics import roc_auc_score

    if 0 < (y == 1).sum() < len(y):
        out["AUC states"] = float(roc_auc_score(y == 1, probs[:, 1]))
    if 0 < (y == 2).sum() < len(y):
        out["AUC wrong"] = float(roc_auc_score(y == 2, probs[:, 2]))
    return out


def main(argv: list[str] | None = None) -> None:
    global TRAINED_FROM
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--validate", action="store_true", help="hold out a fifth of tuning")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument(
        "--trained-from", type=int, default=TRAINED_FROM, help="first fine-tuned layer (0..5)"
    )
    parser.add_argument("--cache", type=Path, help="keep sentence vectors in this file")
    parser.add_argument("--no-answers", action="store_true", help="written sentences only")
    parser.add_argument(
        "--fold",
        type=int,
        choices=range(FOLDS),
        help="train on the tuning questions outside this fold and write var/ (cross-fitting)",
    )
    args = parser.parse_args(argv)
    TRAINED_FROM = args.trained_from

    from bench import rubric_blind
    from trainer.grading.rubric import reader

    reader.use(False)  # the answers' sentences are picked by the bi-encoder alone
    points, prompts = bank_points()
    old = [c for c in load_cases() if c.slug in points]
    blind = [as_case(c) for c in rubric_blind.load() if c.slug in points]
    tuning_slugs = {c.slug for c in [*old, *blind] if not held_out(c.slug)}
    if args.validate:
        train_slugs = {s for s in tuning_slugs if not split_val(s)}
        val_slugs = tuning_slugs - train_slugs
    elif args.fold is not None:
        train_slugs = {s for s in tuning_slugs if fold(s) != args.fold}
        val_slugs = tuning_slugs - train_slugs
    else:
        train_slugs, val_slugs = tuning_slugs, set()
    rng = random.Random(SEED)
    with EmbeddingCache(args.cache) if args.cache else contextlib.nullcontext():
        answers = [c for c in [*old, *blind] if c.slug in train_slugs]
        val_answers = [c for c in blind if c.slug in val_slugs]
        held = [c for c in blind if held_out(c.slug)]
        train_r = analyse(answers, points, prompts)
        val_r = analyse(val_answers, points, prompts)
        held_r = analyse(held, points, prompts) if not val_slugs else []
    pairs = written_pairs(points, train_slugs, rng)
    n_written = len(pairs)
    if not args.no_answers:
        pairs += answer_pairs(answers, points, train_r)
    print(
        f"training pairs: {len(pairs)} ({n_written} written, {len(pairs) - n_written} from answers)"
    )
    model = train(pairs, args.epochs)
    report = {}
    meta = {
        "pairs": len(pairs),
        "written": n_written,
        "epochs": args.epochs,
        "trained_from": TRAINED_FROM,
        "seed": SEED,
    }
    if args.fold is not None:
        fold_path(args.fold).parent.mkdir(exist_ok=True)
        reader.save(
            model.bert, model.head, TRAINED_FROM, meta | {"fold": args.fold}, fold_path(args.fold)
        )
        print(f"wrote {fold_path(args.fold).relative_to(ROOT)}")
    if val_slugs:
        report["validation (written)"] = evaluate(model, written_pairs(points, val_slugs, rng))
        report["validation (blind answers)"] = evaluate(
            model, answer_pairs(val_answers, points, val_r)
        )
    else:
        reader.save(model.bert, model.head, TRAINED_FROM, meta)
        print(f"wrote {reader.WEIGHTS.relative_to(ROOT)}")
        report["blind held-out answers (read only)"] = evaluate(
            model, answer_pairs(held, points, held_r)
        )
    for name, m in report.items():
        print(
            name
            + ": "
            + ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in m.items()
            )
        )


if __name__ == "__main__":
    main()
