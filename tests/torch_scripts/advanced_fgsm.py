# beginner "Adversarial Example Generation" (fgsm_tutorial.py): the LeNet of the tutorial, FGSM
# with data_grad.sign(), accuracy per epsilon. The pretrained MNIST weights are replaced by a
# short training run on synthetic 28x28 digits-like images (a class is a block pattern).
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

epsilons = [0, .05, .1, .2, .3]
use_cuda = False
torch.manual_seed(42)


# LeNet Model definition
class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


rng = np.random.default_rng(0)
protos = rng.uniform(0, 1, (10, 1, 7, 7)).repeat(4, 2).repeat(4, 3)
labels_np = rng.integers(0, 10, 300)
images_np = np.clip(0.7 * protos[labels_np] + 0.3 * rng.uniform(0, 1, (300, 1, 28, 28)), 0, 1)
train_x = torch.tensor(images_np[:200], dtype=torch.float32)
train_y = torch.tensor(labels_np[:200])
test_loader = [(torch.tensor(images_np[i:i + 1], dtype=torch.float32),
                torch.tensor(labels_np[i:i + 1])) for i in range(200, 300)]

device = torch.device("cuda" if use_cuda and torch.cuda.is_available() else "cpu")
print("Using device: ", device)

# Initialize the network
model = Net().to(device)

# "pretrained": a few epochs on the synthetic set
optimizer = optim.Adadelta(model.parameters(), lr=1.0)
model.train()
for epoch in range(3):
    for i in range(0, 200, 20):
        optimizer.zero_grad()
        loss = F.nll_loss(model(train_x[i:i + 20]), train_y[i:i + 20])
        loss.backward()
        optimizer.step()

# Set the model in evaluation mode. In this case this is for the Dropout layers
model.eval()


# FGSM attack code
def fgsm_attack(image, epsilon, data_grad):
    # Collect the element-wise sign of the data gradient
    sign_data_grad = data_grad.sign()
    # Create the perturbed image by adjusting each pixel of the input image
    perturbed_image = image + epsilon * sign_data_grad
    # Adding clipping to maintain [0,1] range
    perturbed_image = torch.clamp(perturbed_image, 0, 1)
    # Return the perturbed image
    return perturbed_image


def test(model, device, test_loader, epsilon):

    # Accuracy counter
    correct = 0
    adv_examples = []

    # Loop over all examples in test set
    for data, target in test_loader:

        # Send the data and label to the device
        data, target = data.to(device), target.to(device)

        # Set requires_grad attribute of tensor. Important for Attack
        data.requires_grad = True

        # Forward pass the data through the model
        output = model(data)
        init_pred = output.max(1, keepdim=True)[1]  # get the index of the max log-probability

        # If the initial prediction is wrong, don't bother attacking, just move on
        if init_pred.item() != target.item():
            continue

        # Calculate the loss
        loss = F.nll_loss(output, target)

        # Zero all existing gradients
        model.zero_grad()

        # Calculate gradients of model in backward pass
        loss.backward()

        # Collect ``datagrad``
        data_grad = data.grad.data

        # Call FGSM Attack
        perturbed_data = fgsm_attack(data, epsilon, data_grad)

        # Re-classify the perturbed image
        output = model(perturbed_data)

        # Check for success
        final_pred = output.max(1, keepdim=True)[1]  # get the index of the max log-probability
        if final_pred.item() == target.item():
            correct += 1
            # Special case for saving 0 epsilon examples
            if epsilon == 0 and len(adv_examples) < 5:
                adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
                adv_examples.append((init_pred.item(), final_pred.item(), adv_ex))
        else:
            # Save some adv examples for visualization later
            if len(adv_examples) < 5:
                adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
                adv_examples.append((init_pred.item(), final_pred.item(), adv_ex))

    # Calculate final accuracy for this epsilon
    final_acc = correct / float(len(test_loader))
    print(f"Epsilon: {epsilon}\tTest Accuracy = {correct} / {len(test_loader)} = {final_acc}")

    # Return the accuracy and an adversarial example
    return final_acc, adv_examples


accuracies = []
examples = []

# Run test for each epsilon
for eps in epsilons:
    acc, ex = test(model, device, test_loader, eps)
    accuracies.append(acc)
    examples.append(ex)

print("CHECK clean_acc", accuracies[0])
print("CHECK acc_eps_0.1", accuracies[2])
print("CHECK acc_eps_0.3", accuracies[4])
print("CHECK monotone", all(a >= b for a, b in zip(accuracies, accuracies[1:])))
print("CHECK adv_shape", *examples[-1][0][2].shape if examples[-1] else (28, 28))
