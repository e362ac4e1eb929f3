"""The model provider boundary: the engine sees `bot.types.Provider`, this package implements it."""
