"""The Augment (augment-BYOK) client dialect: request and stream codecs."""
