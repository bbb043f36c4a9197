"""python -m viable_tf.pretrained: the shipped models, one line each (see __init__)."""

from viable_tf.pretrained import describe

for line in describe():
    print(line)
