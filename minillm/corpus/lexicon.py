"""The course's words: characters, feelings, hobbies and small scene details the story grammar draws from.

Everything here is plain data; objects and places live in :mod:`minillm.corpus.objects` and
:mod:`minillm.corpus.places`.
"""

from __future__ import annotations

GIRL_NAMES: tuple[str, ...] = (
    "Lily", "Mia", "Emma", "Anna", "Sara", "Lucy", "Zoe", "Ella", "Maya", "Rosa",
    "Nina", "Amy", "Ruby", "Grace", "Chloe", "Sophie", "Hannah", "Leah", "Ivy", "Julia",
    "Kate", "Nora", "Tina", "Jill", "Molly", "Sally", "Jenny", "Clara", "Alice", "Eva",
    "Rita", "Lena", "Mila", "Hazel", "Poppy",
)  # fmt: skip
BOY_NAMES: tuple[str, ...] = (
    "Tom", "Ben", "Sam", "Leo", "Jack", "Tim", "Finn", "Noah", "Luke", "Jake",
    "Oliver", "Eli", "Theo", "Owen", "Adam", "Henry", "Oscar", "Ryan", "Kevin", "Mark",
    "Paul", "Bob", "Joe", "Dan", "Pete", "Hugo", "Ivan", "Felix", "Jim", "Alex",
    "Sid", "Ned", "Carl", "Arlo", "Milo",
)  # fmt: skip
#: Names for animal characters; the pronoun is drawn per story.
PET_NAMES: tuple[str, ...] = (
    "Max", "Spot", "Fluffy", "Bella", "Coco", "Buddy", "Rex", "Pip", "Sunny", "Whiskers",
    "Daisy", "Lucky", "Tiny", "Patch", "Bubbles", "Pepper", "Ginger", "Rusty", "Snowy", "Biscuit",
)  # fmt: skip
ANIMALS: tuple[str, ...] = (
    "cat", "dog", "bunny", "bird", "mouse", "fox", "bear", "duck", "frog", "puppy",
    "kitten", "owl", "squirrel", "pig", "lamb", "turtle", "hedgehog", "goat", "deer", "monkey",
)  # fmt: skip
#: Adjectives that describe a character before its noun ("a curious girl").
TRAITS: tuple[str, ...] = (
    "little", "kind", "happy", "curious", "brave", "shy", "small", "young", "clever", "playful",
    "gentle", "friendly", "funny", "cheerful", "silly", "quiet", "busy", "sweet", "smart", "jolly",
)  # fmt: skip
HOBBIES: tuple[tuple[str, str], ...] = (
    ("play outside", "played outside"),
    ("sing songs", "sang songs"),
    ("draw pictures", "drew pictures"),
    ("run and jump", "ran and jumped"),
    ("read books", "read books"),
    ("explore new places", "explored new places"),
    ("help {his} mom in the kitchen", "helped {his} mom in the kitchen"),
    ("build towers with blocks", "built towers with blocks"),
    ("dance in the sun", "danced in the sun"),
    ("look at the stars", "looked at the stars"),
    ("play games with {his} friends", "played games with {his} friends"),
    ("watch the clouds", "watched the clouds"),
    ("splash in puddles", "splashed in puddles"),
    ("tell funny jokes", "told funny jokes"),
    ("climb trees", "climbed trees"),
    ("bake muffins with {his} grandma", "baked muffins with {his} grandma"),
    ("plant flowers", "planted flowers"),
    ("collect bugs in the yard", "collected bugs in the yard"),
    ("play hide and seek", "played hide and seek"),
    ("make music with pots and spoons", "made music with pots and spoons"),
)
#: A sentence about the weather, told after the trip.
WEATHER: tuple[str, ...] = (
    "The sun was shining and the sky was blue.",
    "A cool breeze was blowing.",
    "Little white clouds floated by.",
    "The air smelled fresh and sweet.",
    "It was a lovely day to be outside.",
    "The morning was quiet and still.",
    "Puddles from the rain last night sparkled on the ground.",
    "A rainbow shone far away in the sky.",
)
#: Snacks for a picnic beat.
SNACKS: tuple[str, ...] = (
    "cheese sandwiches", "sweet strawberries", "warm muffins", "crunchy carrots", "banana bread",
    "cherry pie", "orange slices", "little cupcakes", "honey toast", "grapes and crackers",
)  # fmt: skip
#: Pronoun forms the generator fills in (listed so that the course vocabulary contains them).
PRONOUNS: tuple[str, ...] = ("he", "she", "his", "her", "him", "they", "them", "their")
HOMES: tuple[str, ...] = (
    "a small house", "a big city", "a little town", "a cozy house by the sea", "a house near the woods",
    "a quiet village", "a yellow house on a hill", "a busy street", "a tiny cottage", "a farm house",
)  # fmt: skip
COLORS: tuple[str, ...] = ("red", "blue", "green", "yellow", "purple", "pink", "orange", "white")
PARENTS: tuple[tuple[str, str], ...] = (("mom", "she"), ("dad", "he"), ("grandma", "she"), ("grandpa", "he"))
#: People who lost something, with their pronoun.
OWNERS: tuple[tuple[str, str], ...] = (
    ("little girl", "she"), ("old man", "he"), ("small boy", "he"), ("kind lady", "she"),
    ("old woman", "she"), ("young man", "he"), ("baby bear", "he"), ("mother duck", "she"),
)  # fmt: skip

#: Feelings in the middle of a story (a problem) and at its end (the resolution).
FEELINGS_MID: tuple[str, ...] = ("sad", "scared", "worried", "upset", "angry", "lonely", "nervous", "grumpy")
FEELINGS_END: tuple[str, ...] = (
    "happy", "proud", "glad", "brave", "calm", "thankful", "excited", "safe", "cheerful", "joyful",
)  # fmt: skip
#: Every feeling word the grammar uses; the gold scorer treats these as the candidates of "how did X feel".
FEELINGS: tuple[str, ...] = (*FEELINGS_MID, *FEELINGS_END, "sorry", "surprised", "curious", "tired", "sleepy")


#: Verbs the grammar uses for "<name> went to the <place>"; the gold scorer reads these to find where someone went.
MOTION_VERBS: tuple[str, ...] = ("went", "walked", "ran", "hurried", "skipped", "rode")
