"""Sentence frames of the story grammar, grouped by the beat of the story they tell.

A frame is a ``str.format`` template whose ``{slots}`` the generator fills from one story plan, so a
name, pronoun or object never changes inside a story. Rules the gold scorer relies on (keep them when
adding frames): the hero's trip always reads "<hero> [and <friend>] <motion verb> to the <place>"; the
find always reads "<finder name> ... found <a/an> [adjective] <object>" with no pronoun; the hero's
final feeling is the last "<hero> felt/was [very|so] <feeling>" in the story.
"""

from __future__ import annotations

INTRO: tuple[str, ...] = (
    "Once upon a time, there was a {trait} {kind} named {hero}.",
    "There once was a {trait} {kind} called {hero}.",
    "{hero} was a {trait} {kind} who lived in {home}.",
    "Once there was a {trait} {kind} named {hero}. {He} lived in {home}.",
    "In {home}, there lived a {trait} {kind} named {hero}.",
)
HOBBY: tuple[str, ...] = (
    "{He} loved to {hobby}.",
    "Every day, {hero} liked to {hobby}.",
    "{His} favorite thing was to {hobby}.",
    "{hero} liked to {hobby}, and {his} favorite color was {color}.",
)
FRIEND: tuple[str, ...] = (
    "{hero} had a good friend, {friend_desc}.",
    "{His} best friend was {friend_desc}.",
    "{hero} often played with {friend_desc}.",
    "Next door lived {friend_desc}, who was {his} best friend.",
)
TRIP_TIME: tuple[str, ...] = (
    "One day", "One sunny morning", "One bright afternoon", "On a warm summer day", "One cold morning",
    "After breakfast", "On Saturday", "One windy day", "Early one morning", "One cloudy day",
)  # fmt: skip
TRIP: tuple[str, ...] = (
    "{time}, {hero} went to the {place} with {friend}.",
    "{time}, {hero} and {friend} went to the {place}.",
    "{time}, {hero} skipped to the {place}, and {friend} came too.",
    "{time}, {hero} hurried to the {place} to meet {friend}.",
    "{time}, {hero} walked to the {place} with {friend}.",
    "{time}, {hero} and {friend} walked to the {place} together.",
    "{time}, {hero} ran to the {place} with {friend} as fast as {he} could.",
)
PICNIC: tuple[str, ...] = (
    "Later, they sat down and ate {snack}.",
    "{hero} had brought {snack}, and they shared them.",
    "They stopped to eat {snack} in the shade.",
)
ACTIVITY: tuple[str, ...] = (
    "First, they {activity_past}.",
    "They wanted to {activity}.",
    "{hero} and {friend} {activity_past} for a while.",
)
FIND: tuple[str, ...] = (
    "Suddenly, {finder} found {a_adj_obj} {spot}.",
    "Then {finder} found {a_adj_obj} {spot}.",
    "After a while, {finder} found {a_adj_obj} {spot}.",
    "{finder} looked {spot} and found {a_adj_obj}.",
    "While they played, {finder} found {a_adj_obj} {spot}.",
)
REACTION: tuple[str, ...] = (
    '"Look, {other}! Look what I have!" said {finder}.',
    '"Wow, what a nice {obj}!" said {other}.',
    '{finder} held up the {obj} and smiled. "Look at this!" {fin_he} said.',
    "{other} ran over to see the {obj}.",
    '"Is it a real {obj}?" asked {other}. "Yes, it is!" said {finder}.',
)

#: Problems for the "problem" plot: (what goes wrong, why the hero is upset, how it is fixed).
OBSTACLES: tuple[tuple[str, str, str], ...] = (
    ("But then it began to rain.", "the rain was cold", "So they waited under a tree until the rain stopped."),
    ("But the {obj} was very dirty.", "the {obj} was dirty", "So {hero} washed the {obj} until it was clean."),
    (
        "But the {obj} had a small crack.",
        "the {obj} was broken",
        "So {hero} asked {his} {parent} for help, and {parent_he} fixed it with glue.",
    ),
    (
        "But a big dog ran by and took the {obj}!",
        "the dog had the {obj}",
        "{friend} ran after the dog, and the dog dropped the {obj}.",
    ),
    (
        "But the {obj} fell into a deep hole.",
        "{he} could not reach it",
        "{friend} used a long stick to get the {obj} out.",
    ),
    (
        "But the wind blew the {obj} into a thorny bush.",
        "the bush was full of thorns",
        "So {hero} reached in very slowly and got it back.",
    ),
)
PROBLEM: tuple[tuple[str, ...], ...] = (
    ("{hero} wanted to {use}.", '"Let us {use}!" said {hero}.', "{hero} could not wait to {use}."),
    ("{obstacle}",),
    (
        "{hero} felt {feel_mid} because {reason}.",
        '"Oh no!" cried {hero}. {He} was {feel_mid} because {reason}.',
    ),
    ('"Do not worry," said {friend}. "We can fix this."', '"I will help you," said {friend}.', ""),
    ("{fix}",),
    ("At last, they {used}.", "Then {hero} and {friend} {used}.", "After that, they {used} together."),
)
SHARE: tuple[tuple[str, ...], ...] = (
    ("{other} wanted to play with the {obj} too.", '"Can I have a turn?" asked {other}.'),
    ('"No, it is mine," said {finder}.', "At first, {finder} did not want to share."),
    (
        "{other} felt {feel_mid} because {finder} would not share.",
        "{other} was {feel_mid} because {finder} did not share.",
    ),
    ("Then {finder} saw that {other} was sad.", "{finder} thought about it for a moment.", ""),
    ('"We can play with it together," said {finder}.', '"Let us share it," said {finder}.'),
    ("So {hero} and {friend} {used} together.", "Then they took turns, and they {used}."),
    ("Sharing was more fun than playing alone.", ""),
)
OWNER: tuple[tuple[str, ...], ...] = (
    ("Then they saw {a_owner} who was crying.", "Just then, {a_owner} walked by. {Owner_he} looked very sad."),
    ('"I lost my {obj}," said the {owner}.', '"Have you seen my {obj}?" asked the {owner}.'),
    ("{hero} felt sorry for the {owner}.", "{hero} was sorry because the {owner} was so sad."),
    (
        "{finder} gave the {obj} back to the {owner}.",
        '"Here it is!" said {finder}, and {fin_he} gave the {obj} to the {owner}.',
    ),
    ('"Thank you so much!" said the {owner} with a big smile.', "The {owner} smiled and said thank you.", ""),
    ("Then the {owner} showed them how to {use}.", "Later, the {owner} let them {use}."),
)
GIFT: tuple[tuple[str, ...], ...] = (
    ('{hero} had an idea. "Let us give the {obj} to {Parent}!" {he} said.', "{hero} wanted to give it as a gift."),
    ("So {hero} took the {obj} home and wrapped it in pretty paper.", "They took the {obj} home and cleaned it."),
    ("When {his} {parent} saw the gift, {parent_he} smiled.", "{His} {parent} opened the gift slowly."),
    ('"Thank you, {hero}! What a lovely gift," said {his} {parent}.', '"I love it!" said {his} {parent}.', ""),
    ("Later, they all {used} together.", "Then {his} {parent} helped them {use}."),
)
NIGHT: tuple[tuple[str, ...], ...] = (
    ("{hero} took the {obj} home.", "That evening, {hero} put the {obj} next to {his} bed."),
    ("At night, {hero} heard a strange noise.", "In the middle of the night, something went bump outside."),
    ("{hero} felt {feel_mid}.", '{hero} was {feel_mid}. "Who is there?" {he} whispered.'),
    ("{He} held the {obj} close.", ""),
    ("{His} {parent} came in and turned on the light.", "{His} {parent} came to look.", ""),
    (
        "It was only the wind.",
        "It was only a little mouse looking for crumbs.",
        "It was only a branch tapping on the window.",
    ),
    ('"There is nothing to be scared of," said {his} {parent}.', ""),
    ("The next morning, {hero} and {friend} {used}.", "The next day, {hero} and {friend} {used}."),
)
#: Which middle part each plot tells, which feelings fit it, and a lesson the ending may state.
PLOTS: dict[str, tuple[tuple[tuple[str, ...], ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "problem": (
        PROBLEM,
        ("sad", "upset", "worried", "grumpy"),
        ("happy", "proud", "glad", "excited"),
        ("it is good to never give up", "friends help each other"),
    ),
    "share": (
        SHARE,
        ("sad", "upset", "lonely", "grumpy"),
        ("happy", "glad", "cheerful", "joyful"),
        ("sharing is fun", "it is good to share"),
    ),
    "owner": (
        OWNER,
        (),
        ("proud", "happy", "glad", "thankful"),
        ("helping others feels good", "it is kind to give things back"),
    ),
    "gift": (
        GIFT,
        (),
        ("proud", "happy", "glad", "joyful"),
        ("giving is as good as getting", "a small gift can bring a big smile"),
    ),
    "night": (
        NIGHT,
        ("scared", "nervous", "worried"),
        ("brave", "safe", "calm"),
        ("there was nothing to fear", "the dark is not so scary"),
    ),
}
END_TIME: tuple[str, ...] = (
    "At the end of the day", "When the sun went down", "That evening", "In the end", "At night",
    "Before bed", "When the day was over",
)  # fmt: skip
ENDING: tuple[str, ...] = (
    "{end_time}, {hero} felt {feel_end}.",
    "{end_time}, {hero} was very {feel_end}.",
    "{end_time}, {hero} hugged {friend}. {hero} felt so {feel_end}.",
    "{hero} felt {feel_end}, and {he} smiled all the way home.",
    "{end_time}, {hero} went home. {hero} was so {feel_end}.",
)
#: The last sentence, sometimes. The stock phrase "They were very happy." is one option among several.
CLOSING: tuple[str, ...] = (
    "From that day on, {hero} and {friend} were best friends.",
    "{hero} learned that {moral}.",
    "{hero} could not wait to play again tomorrow.",
    "{He} went to sleep with a big smile.",
    "It was the best day ever.",
    "They were very happy.",
)
