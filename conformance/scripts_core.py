"""placeholder"""


def check_step(step):
    return None
