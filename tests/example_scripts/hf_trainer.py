"""A Hugging Face ``Trainer`` training: a tiny BERT classifier built from a config (randomly
initialised, nothing downloaded), four steps on the CPU, AdamW. Seeded by the Trainer.

    python hf_trainer.py [--lr LR] [--seed S] [--flip-step N] [--out PATH]

``--flip-step N`` flips the lowest bit of the first token id of training step N's batch.
"""

from __future__ import annotations

import tempfile

import torch
from planted import planted_arguments
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

VOCAB, LENGTH, EXAMPLES = 64, 12, 64


class Batches:
    """The default collation, with the lowest bit of one token id flipped at one step."""

    def __init__(self, flip_step: int) -> None:
        self.flip_step, self.calls = flip_step, 0

    def __call__(self, examples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        batch = {key: torch.stack([e[key] for e in examples]) for key in examples[0]}
        if self.calls == self.flip_step:
            batch["input_ids"][0, 1] ^= 1
        self.calls += 1
        return batch


def main() -> None:
    args = planted_arguments(lr=1e-3)
    generator = torch.Generator().manual_seed(1234)
    ids = torch.randint(1, VOCAB, (EXAMPLES, LENGTH), generator=generator)
    examples = [
        {"input_ids": row, "attention_mask": torch.ones(LENGTH, dtype=torch.long),
         "labels": row[:4].sum() % 2}
        for row in ids
    ]  # fmt: skip
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=LENGTH,
        num_labels=2,
    )
    with tempfile.TemporaryDirectory() as scratch:
        training = TrainingArguments(
            output_dir=scratch,
            max_steps=4,
            per_device_train_batch_size=16,
            learning_rate=args.lr,
            seed=args.seed,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            use_cpu=True,
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = Trainer(
            model_init=lambda: BertForSequenceClassification(config),
            args=training,
            train_dataset=examples,
            data_collator=Batches(args.flip_step),
        )
        trainer.train()
    if args.out:
        torch.save(trainer.model.state_dict(), args.out)


if __name__ == "__main__":
    main()
