# "NLP From Scratch: Classifying Names with a Character-Level RNN"
# (char_rnn_classification_tutorial.py, the nn.RNN / Dataset version); the names files replaced
# by synthetic names whose language is given by their letter pattern.
import random
import string
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import Dataset

torch.set_default_device("cpu")

# We can use "_" to represent an out-of-vocabulary character, that is, any character we are not
# handling in our model
allowed_characters = string.ascii_letters + " .,;'" + "_"
n_letters = len(allowed_characters)


# Find letter index from all_letters, e.g. "a" = 0
def letterToIndex(letter):
    # return our out-of-vocabulary character if we encounter a letter unknown to our model
    if letter not in allowed_characters:
        return allowed_characters.find("_")
    else:
        return allowed_characters.find(letter)


# Turn a line into a <line_length x 1 x n_letters>,
# or an array of one-hot letter vectors
def lineToTensor(line):
    tensor = torch.zeros(len(line), 1, n_letters)
    for li, letter in enumerate(line):
        tensor[li][0][letterToIndex(letter)] = 1
    return tensor


print(f"The letter 'a' becomes {lineToTensor('a')}")  # notice that the first position in the tensor = 1
print(f"The name 'Ahn' becomes {lineToTensor('Ahn')}")  # notice 'A' sets the 27th index to 1


class NamesDataset(Dataset):

    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        syllables = {"Greek": ["os", "is", "ko", "pou"], "Japanese": ["ka", "shi", "ta", "moto"],
                     "Polish": ["ski", "cz", "wa", "k"], "Scottish": ["mac", "an", "gor", "don"]}
        self.data = []
        self.data_tensors = []
        self.labels = []
        self.labels_tensors = []
        for label, parts in syllables.items():
            for _ in range(15):
                name = "".join(rng.choice(parts, size=int(rng.integers(2, 4)))).capitalize()
                self.data.append(name)
                self.data_tensors.append(lineToTensor(name))
                self.labels.append(label)

        # Cache the tensor representation of the labels
        self.labels_uniq = list(set(self.labels))
        self.labels_uniq.sort()
        for idx in range(len(self.labels)):
            temp_tensor = torch.tensor([self.labels_uniq.index(self.labels[idx])], dtype=torch.long)
            self.labels_tensors.append(temp_tensor)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        data_item = self.data[idx]
        data_label = self.labels[idx]
        data_tensor = self.data_tensors[idx]
        label_tensor = self.labels_tensors[idx]

        return label_tensor, data_tensor, data_label, data_item


alldata = NamesDataset(0)
print(f"loaded {len(alldata)} items of data")
print(f"example = {alldata[0]}")

train_set, test_set = torch.utils.data.random_split(alldata, [.85, .15], generator=torch.Generator(device="cpu").manual_seed(2024))

print(f"train examples = {len(train_set)}, validation examples = {len(test_set)}")


class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super(CharRNN, self).__init__()

        self.rnn = nn.RNN(input_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, line_tensor):
        rnn_out, hidden = self.rnn(line_tensor)
        output = self.h2o(hidden[0])
        output = self.softmax(output)

        return output


n_hidden = 32
rnn = CharRNN(n_letters, n_hidden, len(alldata.labels_uniq))
print(rnn)


def label_from_output(output, output_labels):
    top_n, top_i = output.topk(1)
    label_i = top_i[0].item()
    return output_labels[label_i], label_i


input = lineToTensor('Albert')
output = rnn(input)  # this is equivalent to ``output = rnn.forward(input)``
print(output)
print(label_from_output(output, alldata.labels_uniq))


def train(rnn, training_data, n_epoch=10, n_batch_size=64, report_every=50, learning_rate=0.2, criterion=nn.NLLLoss()):
    """
    Learn on a batch of training_data for a specified number of iterations and reporting thresholds
    """
    # Keep track of losses for plotting
    current_loss = 0
    all_losses = []
    rnn.train()
    optimizer = torch.optim.SGD(rnn.parameters(), lr=learning_rate)

    start = time.time()
    print(f"training on data set with n = {len(training_data)}")

    for iter in range(1, n_epoch + 1):
        rnn.zero_grad()  # clear the gradients

        # create some minibatches
        # we cannot use dataloaders because each of our names is a different length
        batches = list(range(len(training_data)))
        random.shuffle(batches)
        batches = np.array_split(batches, len(batches) // n_batch_size)

        for idx, batch in enumerate(batches):
            batch_loss = 0
            for i in batch:  # for each example in this batch
                (label_tensor, text_tensor, label, text) = training_data[i]
                output = rnn.forward(text_tensor)
                loss = criterion(output, label_tensor)
                batch_loss += loss

            # optimize parameters
            batch_loss.backward()
            nn.utils.clip_grad_norm_(rnn.parameters(), 3)
            optimizer.step()
            optimizer.zero_grad()

            current_loss += batch_loss.item() / len(batch)

        all_losses.append(current_loss / len(batches))
        if iter % report_every == 0:
            print(f"{iter} ({iter / n_epoch:.0%}): \t average batch loss = {all_losses[-1]}")
        current_loss = 0

    return all_losses


random.seed(0)
start = time.time()
all_losses = train(rnn, train_set, n_epoch=8, learning_rate=0.15, report_every=2, n_batch_size=17)
end = time.time()
print(f"training took {end-start}s")


def evaluate(rnn, testing_data, classes):
    confusion = torch.zeros(len(classes), len(classes))

    rnn.eval()  # set to eval mode
    with torch.no_grad():  # do not record the gradients during eval phase
        for i in range(len(testing_data)):
            (label_tensor, text_tensor, label, text) = testing_data[i]
            output = rnn(text_tensor)
            guess, guess_i = label_from_output(output, classes)
            label_i = classes.index(label)
            confusion[label_i][guess_i] += 1

    # Normalize by dividing every row by its sum
    for i in range(len(classes)):
        denom = confusion[i].sum()
        if denom > 0:
            confusion[i] = confusion[i] / denom
    return confusion


confusion = evaluate(rnn, test_set, classes=alldata.labels_uniq)
print(confusion)
print("CHECK n_train", len(train_set), len(test_set))
print("CHECK first_loss", all_losses[0])
print("CHECK last_loss", all_losses[-1])
print("CHECK mean_diag", confusion.diag().mean().item())
