# PyTorch tutorial "Text classification with the torchtext library"
# (beginner_source/text_sentiment_ngrams_tutorial.py): TextClassificationModel over
# nn.EmbeddingBag with offsets, collate_batch (cumsum offsets, cat of variable-length texts),
# DataLoader with collate_fn, random_split, SGD + StepLR stepped on a plateau,
# clip_grad_norm_, evaluate and predict. AG_NEWS and torchtext are replaced by synthetic
# four-class "news" (each class draws most words from its own topic list) with a whitespace
# tokenizer, bigrams and a vocabulary built in plain Python.
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data.dataset import random_split

rng = np.random.default_rng(0)
topics = {
    1: "war peace minister election treaty border summit government".split(),
    2: "match goal team season coach player league score".split(),
    3: "market stock profit shares bank investor price trade".split(),
    4: "software chip research space data internet phone robot".split(),
}
common = "the a of in on to and for with today new says report".split()


def make_split(n):
    rows = []
    for _ in range(n):
        label = int(rng.integers(1, 5))
        words = []
        for _ in range(int(rng.integers(6, 14))):
            if rng.random() < 0.45:
                words.append(topics[label][int(rng.integers(8))])
            elif rng.random() < 0.2:
                other = int(rng.integers(1, 5))
                words.append(topics[other][int(rng.integers(8))])
            else:
                words.append(common[int(rng.integers(len(common)))])
        rows.append((label, " ".join(words)))
    return rows


train_iter, test_iter = make_split(600), make_split(200)


def tokenizer(line):
    return line.lower().split()


def ngrams_iterator(tokens, n):
    yield from tokens
    for i in range(len(tokens) - 1):
        yield " ".join(tokens[i:i + 2])


vocab_index = {"<unk>": 0}
for _, text in train_iter:
    for tok in ngrams_iterator(tokenizer(text), 2):
        vocab_index.setdefault(tok, len(vocab_index))


def vocab(tokens):
    return [vocab_index.get(t, 0) for t in tokens]


print(vocab(["here", "is", "the", "an", "example"]))


def text_pipeline(x):
    return vocab(list(ngrams_iterator(tokenizer(x), 2)))


def label_pipeline(x):
    return int(x) - 1


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for _label, _text in batch:
        label_list.append(label_pipeline(_label))
        processed_text = torch.tensor(text_pipeline(_text), dtype=torch.int64)
        text_list.append(processed_text)
        offsets.append(processed_text.size(0))
    label_list = torch.tensor(label_list, dtype=torch.int64)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return label_list.to(device), text_list.to(device), offsets.to(device)


class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class):
        super(TextClassificationModel, self).__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()

    def init_weights(self):
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()

    def forward(self, text, offsets):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)


num_class = len(set([label for (label, text) in train_iter]))
vocab_size = len(vocab_index)
emsize = 32
torch.manual_seed(0)
model = TextClassificationModel(vocab_size, emsize, num_class).to(device)
print("CHECK sizes", num_class, vocab_size)

first = collate_batch(train_iter[:3])
print("CHECK offsets", first[2].tolist(), first[1].shape[0], first[0].tolist())


def train(dataloader):
    model.train()
    total_acc, total_count = 0, 0
    log_interval = 10
    start_time = time.time()

    for idx, (label, text, offsets) in enumerate(dataloader):
        optimizer.zero_grad()
        predicted_label = model(text, offsets)
        loss = criterion(predicted_label, label)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        total_acc += (predicted_label.argmax(1) == label).sum().item()
        total_count += label.size(0)
        if idx % log_interval == 0 and idx > 0:
            elapsed = time.time() - start_time
            print(
                "| epoch {:3d} | {:5d}/{:5d} batches "
                "| accuracy {:8.3f}".format(
                    epoch, idx, len(dataloader), total_acc / total_count
                )
            )
            total_acc, total_count = 0, 0
            start_time = time.time()


def evaluate(dataloader):
    model.eval()
    total_acc, total_count = 0, 0

    with torch.no_grad():
        for idx, (label, text, offsets) in enumerate(dataloader):
            predicted_label = model(text, offsets)
            loss = criterion(predicted_label, label)
            total_acc += (predicted_label.argmax(1) == label).sum().item()
            total_count += label.size(0)
    return total_acc / total_count


EPOCHS = 6
LR = 5
BATCH_SIZE = 16

criterion = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=LR)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)
total_accu = None
train_dataset = train_iter
test_dataset = test_iter
num_train = int(len(train_dataset) * 0.95)
split_train_, split_valid_ = random_split(
    train_dataset, [num_train, len(train_dataset) - num_train]
)
print("CHECK split", len(split_train_), len(split_valid_))

train_dataloader = DataLoader(
    split_train_, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch
)
valid_dataloader = DataLoader(
    split_valid_, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch
)
test_dataloader = DataLoader(
    test_dataset, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch
)

for epoch in range(1, EPOCHS + 1):
    epoch_start_time = time.time()
    train(train_dataloader)
    accu_val = evaluate(valid_dataloader)
    if total_accu is not None and total_accu > accu_val:
        scheduler.step()
    else:
        total_accu = accu_val
    print("-" * 59)
    print(
        "| end of epoch {:3d} | time: {:5.2f}s | "
        "valid accuracy {:8.3f} ".format(
            epoch, time.time() - epoch_start_time, accu_val
        )
    )
    print("-" * 59)

print("Checking the results of test dataset.")
accu_test = evaluate(test_dataloader)
print("test accuracy {:8.3f}".format(accu_test))
print("CHECK test_accuracy", round(accu_test, 3))

ag_news_label = {1: "World", 2: "Sports", 3: "Business", 4: "Sci/Tec"}


def predict(text, text_pipeline):
    with torch.no_grad():
        text = torch.tensor(text_pipeline(text))
        output = model(text, torch.tensor([0]))
        return output.argmax(1).item() + 1


ex_text_str = "the coach says the team and the player score a goal in the match today"
model = model.to("cpu")
print("This is a %s news" % ag_news_label[predict(ex_text_str, text_pipeline)])
print("CHECK predicted", ag_news_label[predict(ex_text_str, text_pipeline)])
