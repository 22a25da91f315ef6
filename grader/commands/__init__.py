"""One module per ``ol`` verb, each a thin function over the layers below; no verb imports another."""
