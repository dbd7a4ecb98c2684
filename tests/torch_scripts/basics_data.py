# Learn the Basics, "Datasets & DataLoaders" (data_tutorial.py): a custom Dataset read from an
# annotations table (here built in memory) with transform / target_transform, and a DataLoader.
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class CustomImageDataset(Dataset):
    def __init__(self, annotations, images, transform=None, target_transform=None):
        self.img_labels = annotations
        self.images = images
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self):
        return len(self.img_labels)

    def __getitem__(self, idx):
        name, label = self.img_labels[idx]
        image = self.images[name]
        if self.transform:
            image = self.transform(image)
        if self.target_transform:
            label = self.target_transform(label)
        return image, label


def to_tensor(image):  # torchvision.transforms.ToTensor: uint8 HxW -> float 1xHxW in [0, 1]
    return torch.from_numpy(image.astype(np.float32) / 255.0).unsqueeze(0)


def one_hot(y):  # the tutorial's Lambda target transform
    return torch.zeros(10, dtype=torch.float).scatter_(0, torch.tensor(y), value=1)


rng = np.random.default_rng(0)
annotations = [(f"img{i}.png", int(rng.integers(0, 10))) for i in range(100)]
images = {name: rng.integers(0, 256, (28, 28), dtype=np.uint8) for name, _ in annotations}
training_data = CustomImageDataset(annotations, images, transform=to_tensor,
                                   target_transform=one_hot)

train_dataloader = DataLoader(training_data, batch_size=64, shuffle=True)

# Display image and label.
train_features, train_labels = next(iter(train_dataloader))
print(f"Feature batch shape: {train_features.size()}")
print(f"Labels batch shape: {train_labels.size()}")
img = train_features[0].squeeze()
label = train_labels[0]
print(f"Label: {label}")

sizes = [len(x) for x, _ in DataLoader(training_data, batch_size=64, shuffle=True)]
dropped = [len(x) for x, _ in DataLoader(training_data, batch_size=32, drop_last=True)]
seen = torch.cat([y.argmax(1) for _, y in DataLoader(training_data, batch_size=16)])

print("CHECK feature_shape", *train_features.size())
print("CHECK label_shape", *train_labels.size())
print("CHECK img_shape", *img.shape)
print("CHECK label_sum", label.sum().item())
print("CHECK sizes", *sizes)
print("CHECK dropped", *dropped)
print("CHECK in_order", int(seen.tolist() == [lab for _, lab in annotations]))
print("CHECK pixel_range", int(bool((train_features >= 0).all() and (train_features <= 1).all())))
