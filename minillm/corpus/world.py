"""The things and places of the story world, each with what fits it.

Each object carries the adjectives that suit it and what you can do with it (present and past form),
each place its sights, hiding spots and an activity, so that a story stays consistent: the object found
is the object used, at a place where such a spot exists. Indoor places get no rain.
"""

from __future__ import annotations

from typing import NamedTuple


class ObjectInfo(NamedTuple):
    """An object: adjectives that fit it and uses as (present, past) verb phrases."""

    adjectives: tuple[str, ...]
    uses: tuple[tuple[str, str], ...]


OBJECTS: dict[str, ObjectInfo] = {
    "ball": ObjectInfo(
        ("red", "blue", "bouncy", "big", "striped"),
        (
            ("kick the ball across the grass", "kicked the ball across the grass"),
            ("throw the ball high in the air", "threw the ball high in the air"),
        ),
    ),
    "kite": ObjectInfo(
        ("red", "colorful", "paper", "big", "striped"),
        (("fly the kite high in the sky", "flew the kite high in the sky"),),
    ),
    "key": ObjectInfo(
        ("golden", "shiny", "tiny", "old", "silver"),
        (
            ("open an old wooden box with the key", "opened an old wooden box with the key"),
            ("unlock the little garden gate with the key", "unlocked the little garden gate with the key"),
        ),
    ),
    "hat": ObjectInfo(
        ("funny", "big", "blue", "straw", "pointy"),
        (("put on the hat and dance", "put on the hat and danced"),),
    ),
    "shell": ObjectInfo(
        ("pink", "pretty", "shiny", "spotted", "white"),
        (
            ("listen to the sea inside the shell", "listened to the sea inside the shell"),
            ("put the shell on a shelf at home", "put the shell on a shelf at home"),
        ),
    ),
    "stone": ObjectInfo(
        ("smooth", "round", "shiny", "gray", "flat"),
        (
            ("skip the stone across the water", "skipped the stone across the water"),
            ("paint a smiling face on the stone", "painted a smiling face on the stone"),
        ),
    ),
    "feather": ObjectInfo(
        ("soft", "long", "blue", "white", "pretty"),
        (("tickle each other with the feather", "tickled each other with the feather"),),
    ),
    "flower": ObjectInfo(
        ("pretty", "yellow", "pink", "tiny", "purple"),
        (("put the flower in a cup of water", "put the flower in a cup of water"),),
    ),
    "stick": ObjectInfo(
        ("long", "strong", "crooked", "thin", "brown"),
        (
            ("draw pictures in the dirt with the stick", "drew pictures in the dirt with the stick"),
            ("play fetch with the stick", "played fetch with the stick"),
        ),
    ),
    "box": ObjectInfo(
        ("big", "small", "wooden", "old", "red"),
        (
            ("build a little house from the box", "built a little house from the box"),
            ("hide their toys inside the box", "hid their toys inside the box"),
        ),
    ),
    "book": ObjectInfo(
        ("old", "big", "colorful", "thick", "funny"),
        (
            ("read the book under a tree", "read the book under a tree"),
            ("look at the pictures in the book", "looked at the pictures in the book"),
        ),
    ),
    "map": ObjectInfo(
        ("old", "torn", "big", "secret", "paper"),
        (("follow the map to a hidden garden", "followed the map to a hidden garden"),),
    ),
    "coin": ObjectInfo(
        ("shiny", "gold", "silver", "old", "tiny"),
        (
            ("put the coin in a piggy bank", "put the coin in a piggy bank"),
            ("buy a sweet treat with the coin", "bought a sweet treat with the coin"),
        ),
    ),
    "ring": ObjectInfo(
        ("shiny", "gold", "silver", "tiny", "pretty"),
        (("wear the ring to a party", "wore the ring to a party"),),
    ),
    "boat": ObjectInfo(
        ("toy", "little", "wooden", "paper", "red"),
        (("sail the boat on the water", "sailed the boat on the water"),),
    ),
    "car": ObjectInfo(
        ("toy", "little", "fast", "red", "shiny"),
        (
            ("race the car down the path", "raced the car down the path"),
            ("push the car along the ground", "pushed the car along the ground"),
        ),
    ),
    "truck": ObjectInfo(
        ("toy", "yellow", "big", "little", "green"),
        (("fill the truck with sand and pebbles", "filled the truck with sand and pebbles"),),
    ),
    "doll": ObjectInfo(
        ("pretty", "old", "little", "soft", "tiny"),
        (("have a tea party with the doll", "had a tea party with the doll"),),
    ),
    "teddy": ObjectInfo(
        ("soft", "brown", "fluffy", "old", "little"),
        (
            ("hug the teddy tight", "hugged the teddy tight"),
            ("take the teddy on a picnic", "took the teddy on a picnic"),
        ),
    ),
    "blanket": ObjectInfo(
        ("warm", "soft", "striped", "big", "cozy"),
        (
            ("have a picnic on the blanket", "had a picnic on the blanket"),
            ("build a fort with the blanket", "built a fort with the blanket"),
        ),
    ),
    "cup": ObjectInfo(
        ("blue", "little", "pretty", "white", "tiny"),
        (("fill the cup with cool water", "filled the cup with cool water"),),
    ),
    "bell": ObjectInfo(
        ("little", "silver", "shiny", "golden", "tiny"),
        (("ring the bell loudly", "rang the bell loudly"),),
    ),
    "drum": ObjectInfo(
        ("little", "red", "old", "loud", "toy"),
        (("play a song on the drum", "played a song on the drum"),),
    ),
    "whistle": ObjectInfo(
        ("shiny", "silver", "little", "loud", "red"),
        (("blow the whistle to start a race", "blew the whistle to start a race"),),
    ),
    "crayon": ObjectInfo(
        ("purple", "green", "orange", "blue", "red"),
        (("draw a big sun with the crayon", "drew a big sun with the crayon"),),
    ),
    "bucket": ObjectInfo(
        ("red", "little", "blue", "plastic", "yellow"),
        (
            ("build a sand castle with the bucket", "built a sand castle with the bucket"),
            ("carry water in the bucket", "carried water in the bucket"),
        ),
    ),
    "shovel": ObjectInfo(
        ("little", "green", "plastic", "red", "old"),
        (("dig a deep hole with the shovel", "dug a deep hole with the shovel"),),
    ),
    "basket": ObjectInfo(
        ("big", "little", "straw", "old", "round"),
        (("fill the basket with berries", "filled the basket with berries"),),
    ),
    "jar": ObjectInfo(
        ("glass", "empty", "little", "old", "round"),
        (("keep pretty pebbles in the jar", "kept pretty pebbles in the jar"),),
    ),
    "lamp": ObjectInfo(
        ("little", "old", "bright", "brass", "tiny"),
        (("read a story by the light of the lamp", "read a story by the light of the lamp"),),
    ),
    "rope": ObjectInfo(
        ("long", "strong", "thick", "old", "yellow"),
        (("make a swing with the rope", "made a swing with the rope"),),
    ),
    "umbrella": ObjectInfo(
        ("big", "red", "yellow", "striped", "old"),
        (("walk in the rain under the umbrella", "walked in the rain under the umbrella"),),
    ),
    "scarf": ObjectInfo(
        ("warm", "long", "woolly", "red", "striped"),
        (("keep warm with the scarf on a cold walk", "kept warm with the scarf on a cold walk"),),
    ),
    "bike": ObjectInfo(
        ("old", "red", "little", "blue", "shiny"),
        (("ride the bike down the path", "rode the bike down the path"),),
    ),
    "wagon": ObjectInfo(
        ("red", "little", "old", "wooden", "big"),
        (("pull the wagon full of toys", "pulled the wagon full of toys"),),
    ),
    "cookie": ObjectInfo(
        ("big", "sweet", "round", "warm", "chocolate"),
        (("share the cookie", "shared the cookie"),),
    ),
    "apple": ObjectInfo(
        ("red", "green", "shiny", "big", "sweet"),
        (("share the apple", "shared the apple"),),
    ),
    "seed": ObjectInfo(
        ("tiny", "brown", "little", "round", "strange"),
        (("plant the seed in the garden", "planted the seed in the garden"),),
    ),
    "egg": ObjectInfo(
        ("blue", "small", "speckled", "white", "tiny"),
        (("bring the egg back to its nest", "brought the egg back to its nest"),),
    ),
    "balloon": ObjectInfo(
        ("red", "big", "round", "green", "shiny"),
        (("play with the balloon in the wind", "played with the balloon in the wind"),),
    ),
    "letter": ObjectInfo(
        ("old", "secret", "long", "folded", "pretty"),
        (("read the letter out loud", "read the letter out loud"),),
    ),
    "puzzle": ObjectInfo(
        ("big", "hard", "colorful", "old", "wooden"),
        (("finish the puzzle", "finished the puzzle"),),
    ),
    "robot": ObjectInfo(
        ("toy", "little", "shiny", "silver", "funny"),
        (("make the robot walk and beep", "made the robot walk and beep"),),
    ),
    "train": ObjectInfo(
        ("toy", "little", "wooden", "blue", "red"),
        (("push the train around its track", "pushed the train around its track"),),
    ),
    "button": ObjectInfo(
        ("shiny", "round", "big", "blue", "tiny"),
        (("sew the button onto an old coat", "sewed the button onto an old coat"),),
    ),
    "marble": ObjectInfo(
        ("glass", "blue", "shiny", "tiny", "green"),
        (("roll the marble down a little hill", "rolled the marble down a little hill"),),
    ),
    "flag": ObjectInfo(
        ("little", "red", "colorful", "paper", "striped"),
        (("wave the flag high", "waved the flag high"),),
    ),
    "crown": ObjectInfo(
        ("golden", "shiny", "paper", "little", "sparkly"),
        (("wear the crown and play king and queen", "wore the crown and played king and queen"),),
    ),
    "wand": ObjectInfo(
        ("magic", "sparkly", "little", "silver", "long"),
        (("wave the wand and pretend to do magic", "waved the wand and pretended to do magic"),),
    ),
    "ribbon": ObjectInfo(
        ("pink", "long", "red", "shiny", "silk"),
        (("tie the ribbon around a gift", "tied the ribbon around a gift"),),
    ),
    "camera": ObjectInfo(
        ("old", "little", "black", "toy", "shiny"),
        (("take pictures of the sky", "took pictures of the sky"),),
    ),
    "guitar": ObjectInfo(
        ("little", "old", "toy", "wooden", "red"),
        (("play a song on the guitar", "played a song on the guitar"),),
    ),
    "bottle": ObjectInfo(
        ("glass", "green", "old", "empty", "little"),
        (("put a message in the bottle", "put a message in the bottle"),),
    ),
    "pillow": ObjectInfo(
        ("soft", "fluffy", "big", "white", "round"),
        (("have a pillow fight", "had a pillow fight"),),
    ),
    "brush": ObjectInfo(
        ("little", "soft", "paint", "thin", "old"),
        (("paint a rainbow with the brush", "painted a rainbow with the brush"),),
    ),
    "mitten": ObjectInfo(
        ("warm", "woolly", "red", "little", "blue"),
        (("keep warm with the mitten in the snow", "kept warm with the mitten in the snow"),),
    ),
}


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
