"""The places of the story world, each with its sights, hiding spots and an activity; indoor ones get no rain."""

from __future__ import annotations

from typing import NamedTuple


class PlaceInfo(NamedTuple):
    """A place: sights (sentences), hiding spots (phrases) and one activity (present, past)."""

    sights: tuple[str, ...]
    spots: tuple[str, ...]
    activity: tuple[str, str]


PLACES: dict[str, PlaceInfo] = {
    "park": PlaceInfo(
        ("The grass was green and soft.", "Birds sang in the tall trees.", "Children played on the swings."),
        ("under a bench", "behind a big tree", "in the tall grass", "near the swings"),
        ("play on the swings", "played on the swings"),
    ),
    "beach": PlaceInfo(
        ("The sand was warm.", "The waves went up and down.", "The sea was blue and bright."),
        ("in the sand", "near the water", "behind a rock", "under a pile of seaweed"),
        ("build a sand castle", "built a sand castle"),
    ),
    "forest": PlaceInfo(
        ("The trees were very tall.", "Leaves crunched under their feet.", "A squirrel ran up a tree."),
        ("under a pile of leaves", "behind an old log", "next to a mushroom", "at the foot of a tall tree"),
        ("look for pine cones", "looked for pine cones"),
    ),
    "garden": PlaceInfo(
        ("Flowers of every color grew there.", "Bees buzzed around the roses.", "The tomatoes were red."),
        ("under a bush", "between the flowers", "in the soft dirt", "next to the watering can"),
        ("water the plants", "watered the plants"),
    ),
    "lake": PlaceInfo(
        ("The water was calm and clear.", "Ducks swam near the shore.", "A soft wind moved the reeds."),
        ("by the shore", "under a wooden dock", "between two rocks", "in the reeds"),
        ("throw bread to the ducks", "threw bread to the ducks"),
    ),
    "farm": PlaceInfo(
        ("Cows ate hay in the barn.", "A rooster crowed loudly.", "Pigs rolled in the mud."),
        ("in a pile of hay", "behind the fence", "next to the chicken coop", "under a cart"),
        ("feed the chickens", "fed the chickens"),
    ),
    "zoo": PlaceInfo(
        ("A lion slept in the sun.", "Monkeys jumped from branch to branch.", "A tall giraffe ate leaves."),
        ("under a bench", "near the monkey house", "next to a fence", "behind a big plant"),
        ("watch the monkeys play", "watched the monkeys play"),
    ),
    "library": PlaceInfo(
        ("It was quiet inside.", "There were books on every shelf.", "A kind lady sat at the desk."),
        ("under a table", "behind a row of books", "on a high shelf", "next to a big chair"),
        ("read picture books", "read picture books"),
    ),
    "market": PlaceInfo(
        ("People sold fruit and bread.", "The air smelled of fresh bread.", "There were many colorful stalls."),
        ("under a fruit stand", "next to a basket of pears", "behind a stall", "on the ground by a cart"),
        ("buy some fresh bread", "bought some fresh bread"),
    ),
    "playground": PlaceInfo(
        ("There was a big red slide.", "Kids laughed on the swings.", "The sandbox was full of toys."),
        ("in the sandbox", "under the slide", "behind the swings", "near the seesaw"),
        ("go down the slide", "slid down the slide"),
    ),
    "hill": PlaceInfo(
        ("From the top they could see the whole town.", "The wind blew softly.", "Yellow flowers covered it."),
        ("behind a big rock", "in the grass at the top", "under a lonely tree", "next to a bush"),
        ("roll down the grassy slope", "rolled down the grassy slope"),
    ),
    "river": PlaceInfo(
        ("The water ran fast over the stones.", "Fish jumped in the water.", "A little bridge crossed it."),
        ("on the bank", "under the little bridge", "between the smooth stones", "in the mud by the water"),
        ("throw pebbles into the water", "threw pebbles into the water"),
    ),
    "pond": PlaceInfo(
        ("Frogs sat on green lily pads.", "Little fish swam in the water.", "Dragonflies flew over the water."),
        ("by the edge of the water", "behind a log", "in the tall reeds", "under a willow tree"),
        ("watch the frogs jump", "watched the frogs jump"),
    ),
    "school": PlaceInfo(
        ("The classroom was bright and busy.", "The teacher smiled at everyone.", "Pictures hung on the walls."),
        ("under a desk", "in the toy corner", "behind the door", "on a windowsill"),
        ("paint pictures", "painted pictures"),
    ),
    "bakery": PlaceInfo(
        ("It smelled of warm bread.", "There were cakes in the window.", "The baker wore a white hat."),
        ("under a table", "behind a sack of flour", "next to the door", "on a chair by the window"),
        ("eat a warm bun", "ate a warm bun"),
    ),
    "meadow": PlaceInfo(
        ("Butterflies flew over the flowers.", "The grass was tall and green.", "The sun was warm."),
        ("in the tall grass", "under a bush", "next to a patch of daisies", "behind a big stone"),
        ("chase butterflies", "chased butterflies"),
    ),
    "woods": PlaceInfo(
        ("It was cool and shady.", "An owl hooted from a branch.", "Tiny mushrooms grew on the ground."),
        ("under a fallen tree", "in a hollow log", "behind a bush", "beside a little stream"),
        ("pick wild berries", "picked wild berries"),
    ),
    "field": PlaceInfo(
        ("Tall corn grew in long rows.", "A scarecrow stood in the middle.", "Crows flew over the corn."),
        ("between the rows of corn", "near the scarecrow", "under a haystack", "by the old fence"),
        ("run through the tall grass", "ran through the tall grass"),
    ),
    "barn": PlaceInfo(
        ("It was full of hay.", "A horse looked out of its stall.", "Kittens played in the straw."),
        ("in the hay", "behind a bale of straw", "under a ladder", "in a dusty corner"),
        ("play hide and seek in the hay", "played hide and seek in the hay"),
    ),
    "museum": PlaceInfo(
        ("There were old bones and shiny stones.", "A big dinosaur stood in the hall.", "Everyone spoke softly."),
        ("under a bench", "behind a big plant", "next to the stairs", "by the door"),
        ("look at the dinosaur bones", "looked at the dinosaur bones"),
    ),
    "store": PlaceInfo(
        ("The shelves were full of food.", "A friendly man stood at the door.", "Music played softly."),
        ("under a shelf", "next to the door", "behind a box of oranges", "near the window"),
        ("buy some milk", "bought some milk"),
    ),
    "cave": PlaceInfo(
        ("It was dark and cool inside.", "Water dripped from the rocks.", "Their voices made a funny echo."),
        ("behind a big rock", "in a dark corner", "under a ledge", "by the entrance"),
        ("listen to the echo", "listened to the echo"),
    ),
    "orchard": PlaceInfo(
        ("Apple trees stood in long rows.", "Ripe fruit hung from the branches.", "Bees buzzed in the trees."),
        ("under an apple tree", "in the grass between the trees", "next to a ladder", "by the gate"),
        ("pick ripe apples", "picked ripe apples"),
    ),
    "island": PlaceInfo(
        ("Palm trees swayed in the wind.", "The water around it was blue.", "Crabs walked on the sand."),
        ("under a palm tree", "in the warm sand", "behind a rock", "near the water"),
        ("look for crabs", "looked for crabs"),
    ),
    "harbor": PlaceInfo(
        ("Big boats rocked on the water.", "Seagulls cried above them.", "Fishermen pulled in their nets."),
        ("next to a pile of nets", "on the wooden dock", "behind a barrel", "near the water"),
        ("watch the boats come in", "watched the boats come in"),
    ),
    "village": PlaceInfo(
        ("The little houses had red roofs.", "A dog barked at a gate.", "People said hello on the street."),
        ("by the old well", "under a bench", "next to a gate", "behind a flower pot"),
        ("visit the old well", "visited the old well"),
    ),
    "mountain": PlaceInfo(
        ("The air was cool and fresh.", "Snow sat on the top.", "A goat climbed the rocks."),
        ("behind a rock", "under a pine tree", "beside the path", "in a crack in the rocks"),
        ("climb the rocky path", "climbed the rocky path"),
    ),
    "kitchen": PlaceInfo(
        ("It smelled like soup.", "Pots and pans hung on the wall.", "The oven was warm."),
        ("under the table", "behind the bread box", "in a drawer", "on a high shelf"),
        ("bake cookies", "baked cookies"),
    ),
}

#: Places under a roof: the story grammar does not let it rain there.
INDOOR: tuple[str, ...] = ("library", "school", "bakery", "museum", "store", "kitchen", "barn", "cave")
