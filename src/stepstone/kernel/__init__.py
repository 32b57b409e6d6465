"""The kernel side: the IPython magics (`%load_ext stepstone`), the state of a
notebook's shell (values given back, process state, names that share objects, retries)
and which notebook the kernel runs. The only package that imports IPython."""
