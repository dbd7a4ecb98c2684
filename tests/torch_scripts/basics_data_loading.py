# beginner "Writing Custom Datasets, DataLoaders and Transforms" (data_loading_tutorial.py): the
# face-landmarks dataset with Rescale / RandomCrop / ToTensor transforms and a DataLoader over
# dict samples. The CSV of landmarks and the images are replaced by NumPy arrays of the same
# shapes (skimage.io.imread/transform.resize replaced by NumPy indexing).
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class FaceLandmarksDataset(Dataset):
    """Face Landmarks dataset."""

    def __init__(self, n, transform=None):
        rng = np.random.default_rng(0)
        self.images = [rng.integers(0, 256, (rng.integers(60, 90), rng.integers(60, 90), 3))
                       .astype(np.uint8) for _ in range(n)]
        self.landmarks = [rng.uniform(0, 50, (68, 2)).astype('float') for _ in range(n)]
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        if torch.is_tensor(idx):
            idx = idx.tolist()
        image = self.images[idx]
        landmarks = self.landmarks[idx]
        landmarks = np.array([landmarks], dtype=float).reshape(-1, 2)
        sample = {'image': image, 'landmarks': landmarks}

        if self.transform:
            sample = self.transform(sample)

        return sample


class Rescale(object):
    """Rescale the image in a sample to a given size."""

    def __init__(self, output_size):
        assert isinstance(output_size, (int, tuple))
        self.output_size = output_size

    def __call__(self, sample):
        image, landmarks = sample['image'], sample['landmarks']

        h, w = image.shape[:2]
        if isinstance(self.output_size, int):
            if h > w:
                new_h, new_w = self.output_size * h / w, self.output_size
            else:
                new_h, new_w = self.output_size, self.output_size * w / h
        else:
            new_h, new_w = self.output_size

        new_h, new_w = int(new_h), int(new_w)

        rows = (np.arange(new_h) * h / new_h).astype(int)
        cols = (np.arange(new_w) * w / new_w).astype(int)
        img = image[rows][:, cols] / 255.0

        landmarks = landmarks * [new_w / w, new_h / h]

        return {'image': img, 'landmarks': landmarks}


class RandomCrop(object):
    """Crop randomly the image in a sample."""

    def __init__(self, output_size):
        assert isinstance(output_size, (int, tuple))
        if isinstance(output_size, int):
            self.output_size = (output_size, output_size)
        else:
            assert len(output_size) == 2
            self.output_size = output_size
        self.rng = np.random.default_rng(1)

    def __call__(self, sample):
        image, landmarks = sample['image'], sample['landmarks']

        h, w = image.shape[:2]
        new_h, new_w = self.output_size

        top = self.rng.integers(0, h - new_h + 1)
        left = self.rng.integers(0, w - new_w + 1)

        image = image[top: top + new_h,
                      left: left + new_w]

        landmarks = landmarks - [left, top]

        return {'image': image, 'landmarks': landmarks}


class ToTensor(object):
    """Convert ndarrays in sample to Tensors."""

    def __call__(self, sample):
        image, landmarks = sample['image'], sample['landmarks']

        # swap color axis because
        # numpy image: H x W x C
        # torch image: C x H x W
        image = image.transpose((2, 0, 1))
        return {'image': torch.from_numpy(image),
                'landmarks': torch.from_numpy(landmarks)}


class Compose(object):
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, sample):
        for t in self.transforms:
            sample = t(sample)
        return sample


face_dataset = FaceLandmarksDataset(12)
for i, sample in enumerate(face_dataset):
    print(i, sample['image'].shape, sample['landmarks'].shape)
    if i == 3:
        break

transformed_dataset = FaceLandmarksDataset(12, transform=Compose([Rescale(64), RandomCrop(56),
                                                                   ToTensor()]))

for i, sample in enumerate(transformed_dataset):
    print(i, sample['image'].size(), sample['landmarks'].size())
    print("CHECK sample%d" % i, *sample['image'].size(), *sample['landmarks'].size(),
          str(sample['image'].dtype).replace("torch.", ""),
          str(sample['landmarks'].dtype).replace("torch.", ""))
    print("CHECK sample_sum%d" % i, sample['image'].sum().item(), sample['landmarks'].sum().item())
    if i == 3:
        break

dataloader = DataLoader(transformed_dataset, batch_size=4,
                        shuffle=False, num_workers=0)

for i_batch, sample_batched in enumerate(dataloader):
    print(i_batch, sample_batched['image'].size(),
          sample_batched['landmarks'].size())
    print("CHECK batch%d" % i_batch, *sample_batched['image'].size(),
          *sample_batched['landmarks'].size(),
          str(sample_batched['image'].dtype).replace("torch.", ""))
print("CHECK n_batches", len(dataloader))

shuffled = DataLoader(transformed_dataset, batch_size=5, shuffle=True, drop_last=True)
sizes = [b['landmarks'].size(0) for b in shuffled]
print("CHECK shuffled_sizes", *sizes)
